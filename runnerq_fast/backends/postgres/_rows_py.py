"""Claimed-row decoding and batch parameter arrays: the pure-Python reference twin.

:mod:`runnerq_fast.backends.postgres.rows` selects the compiled twin when it is built. A SQL
backend turns the rows of its claim statement into :class:`ClaimedActivity`
objects and passes acks, lease references and new activities to its batch
statements as parallel arrays (one list per column, for ``unnest``); these are
the per-item loops of a drain.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from runnerq_fast.models import Ack, ClaimedActivity, LeaseRef, NewActivity

__all__ = ["PG_EPOCH_MS", "ack_params", "claimed_from_rows", "enqueue_params", "epoch_ms", "lease_params"]


#: Milliseconds from the Unix epoch to PostgreSQL's epoch, 2000-01-01 00:00 UTC.
PG_EPOCH_MS = 946_684_800_000


def epoch_ms(sent: bytes) -> int:
    """Epoch milliseconds (floor) of a ``timestamptz_send()`` value.

    Parameters
    ----------
    sent : bytes
        8 bytes: a signed big-endian count of microseconds since
        2000-01-01 00:00 UTC (PostgreSQL's binary ``timestamptz``).

    Returns
    -------
    int
        ``floor(microseconds / 1000)`` from 1970-01-01 00:00 UTC, the figure
        ``floor(extract(epoch FROM x) * 1000)`` gives.

    Raises
    ------
    ValueError
        If ``sent`` is not 8 bytes long.
    TypeError
        If ``sent`` is not bytes-like.
    """
    if len(sent) != 8:
        raise ValueError(f"a timestamptz_send() value has 8 bytes, not {len(sent)}")
    return int.from_bytes(sent, "big", signed=True) // 1000 + PG_EPOCH_MS


def claimed_from_rows(rows: Iterable[Any], token: str) -> list[ClaimedActivity]:
    """Build the activities of one claim from its result rows.

    Parameters
    ----------
    rows : iterable of indexable rows
        Rows of 10 columns: id (an object with a ``hex`` attribute, e.g. a
        UUID), activity_type, payload, priority, retry_count, max_retries,
        timeout_ms, metadata, created_at, ready_at; the two times as
        ``timestamptz_send()`` bytes (see :func:`epoch_ms`).
    token : str
        The claim token every activity of the claim carries.

    Returns
    -------
    list of ClaimedActivity
        In row order; ``created_at_ms`` and ``ready_at_ms`` in epoch milliseconds.

    Raises
    ------
    AttributeError
        If an id has no ``hex`` attribute.
    IndexError, TypeError
        If a row has fewer than 10 columns or is not indexable, or a time is
        not bytes-like.
    ValueError
        If a time is not 8 bytes long.
    """
    return [
        ClaimedActivity(r[0].hex, r[1], r[2], r[3], r[4], r[5], r[6], r[7], token, epoch_ms(r[8]), epoch_ms(r[9]))
        for r in rows
    ]


def ack_params(
    acks: Sequence[Ack],
) -> tuple[list[str], list[str], list[int], list[str | None], list[str | None], list[int]]:
    """Parallel arrays of an ack batch: ids, claim tokens, outcomes, results (text), errors, retry times (ms).

    Raises
    ------
    UnicodeDecodeError
        If a result is not valid UTF-8.
    """
    return (
        [a.id for a in acks],
        [a.claim_token for a in acks],
        [a.outcome for a in acks],
        [None if a.result is None else a.result.decode() for a in acks],
        [a.error for a in acks],
        [a.retry_at_ms for a in acks],
    )


def lease_params(leases: Sequence[LeaseRef]) -> tuple[list[str], list[str]]:
    """Parallel arrays of lease references: ids and claim tokens (heartbeat and release)."""
    return [r.id for r in leases], [r.claim_token for r in leases]


def enqueue_params(
    items: Sequence[NewActivity],
) -> tuple[
    list[str], list[str], list[str], list[int], list[int], list[int], list[int], list[str], list[str | None]
]:
    """Parallel arrays of an enqueue batch.

    Returns
    -------
    tuple of 9 lists
        ids, activity types, payloads (text), priorities, max retries,
        timeouts (ms), run-at times (epoch ms), metadata (text), idempotency keys.

    Raises
    ------
    UnicodeDecodeError
        If a payload or metadata is not valid UTF-8.
    """
    return (
        [it.id for it in items],
        [it.activity_type for it in items],
        [it.payload.decode() for it in items],
        [it.priority for it in items],
        [it.max_retries for it in items],
        [it.timeout_ms for it in items],
        [it.run_at_ms for it in items],
        [it.metadata.decode() for it in items],
        [it.idempotency_key for it in items],
    )
