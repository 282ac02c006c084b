"""Type stub of the compiled row decoding and batch arrays (``src_pyx/runnerq_fast/backends/postgres/_rows.pyx``).

Semantics in ``runnerq_fast.backends.postgres._rows_py``.
"""

from collections.abc import Iterable, Sequence
from typing import Any

from runnerq_fast.models import Ack, ClaimedActivity, LeaseRef, NewActivity

PG_EPOCH_MS: int

def epoch_ms(sent: bytes) -> int: ...
def claimed_from_rows(rows: Iterable[Any], token: str) -> list[ClaimedActivity]: ...
def ack_params(
    acks: Sequence[Ack],
) -> tuple[list[str], list[str], list[int], list[str | None], list[str | None], list[int]]: ...
def lease_params(leases: Sequence[LeaseRef]) -> tuple[list[str], list[str]]: ...
def enqueue_params(
    items: Sequence[NewActivity],
) -> tuple[
    list[str], list[str], list[str], list[int], list[int], list[int], list[int], list[str], list[str | None]
]: ...
