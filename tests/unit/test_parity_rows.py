"""Compiled claimed-row decoding and batch parameter arrays agree with the pure-Python twin."""

from __future__ import annotations

import importlib
import uuid
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runnerq_fast.backends.postgres import _rows_py
from runnerq_fast.models import Ack, ClaimedActivity, LeaseRef, NewActivity


def _compiled() -> ModuleType | None:
    try:
        return importlib.import_module("runnerq_fast.backends.postgres._rows")
    except ImportError:
        return None


COMPILED = _compiled()
needs_compiled = pytest.mark.skipif(COMPILED is None, reason="the compiled rows module is not built")
IMPLS = [pytest.param(_rows_py, id="pure"), pytest.param(COMPILED, id="compiled", marks=needs_compiled)]


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except Exception as exc:
        return type(exc).__name__, str(exc)


texts = st.text(max_size=12)
json_bytes = st.sampled_from([b"{}", b'{"a":1}', "{}", b"\xff\xfe", b"[" * 5])
ms = st.integers(-(2**63), 2**63 - 1)
# a timestamptz_send() value: 8 big-endian bytes of microseconds since 2000-01-01 (now and then another length)
sent_times = st.integers(-(2**63), 2**63 - 1).map(lambda us: us.to_bytes(8, "big", signed=True)) | st.binary(max_size=9)
retry_counts = st.integers(0, 100_000)

rows = st.lists(
    st.tuples(
        st.uuids(),
        texts,
        json_bytes,
        st.integers(1, 4),
        retry_counts,
        retry_counts,
        st.integers(0, 2**40),
        json_bytes,
        sent_times,
        sent_times,
    ),
    max_size=30,
)
acks = st.lists(
    st.builds(
        Ack,
        st.uuids().map(lambda u: u.hex) | texts,
        texts,
        st.integers(1, 4),
        st.none() | st.binary(max_size=10),  # invalid UTF-8 included: both raise UnicodeDecodeError
        st.none() | texts,
        ms,
    ),
    max_size=30,
)
leases = st.lists(st.builds(LeaseRef, texts, texts), max_size=30)
new_items = st.lists(
    st.builds(
        NewActivity,
        texts,
        texts,
        st.binary(max_size=8),
        st.integers(1, 4),
        retry_counts,
        st.integers(0, 2**40),
        ms,
        st.binary(max_size=8),
        st.none() | texts,
    ),
    max_size=30,
)


@needs_compiled
@given(rows, texts)
def test_claimed_rows_agree(batch: list[tuple[Any, ...]], token: str) -> None:
    assert COMPILED is not None
    assert outcome(COMPILED.claimed_from_rows, batch, token) == outcome(_rows_py.claimed_from_rows, batch, token)


SENT0 = bytes(8)
BAD_ROWS = [[("short",)], [(1, "t", b"{}", 2, 0, 3, 0, b"{}", SENT0, SENT0)], [None], 5,
            [(uuid.uuid4(), "t", b"{}", 2, 0, 3, 0, b"{}", 10, SENT0)],
            [(uuid.uuid4(), "t", b"{}", 2, 0, 3, 0, b"{}", SENT0, b"\x00" * 7)],
            [(uuid.uuid4(), "t", b"{}", 2, 0, 3, 0, b"{}", SENT0, None)]]


@needs_compiled
@pytest.mark.parametrize("bad", BAD_ROWS)
def test_claimed_rows_errors_agree(bad: Any) -> None:
    assert COMPILED is not None
    got = outcome(COMPILED.claimed_from_rows, bad, "tok")
    assert got[0] != "ok"
    assert got == outcome(_rows_py.claimed_from_rows, bad, "tok")


@needs_compiled
@given(acks)
def test_ack_params_agree(batch: list[Ack]) -> None:
    assert COMPILED is not None
    assert outcome(COMPILED.ack_params, batch) == outcome(_rows_py.ack_params, batch)


@needs_compiled
@given(leases)
def test_lease_params_agree(batch: list[LeaseRef]) -> None:
    assert COMPILED is not None
    assert outcome(COMPILED.lease_params, batch) == outcome(_rows_py.lease_params, batch)


@needs_compiled
@given(new_items)
def test_enqueue_params_agree(batch: list[NewActivity]) -> None:
    assert COMPILED is not None
    assert outcome(COMPILED.enqueue_params, batch) == outcome(_rows_py.enqueue_params, batch)


@pytest.mark.parametrize("impl", IMPLS)
def test_rows_behaviour(impl: ModuleType) -> None:
    u = uuid.uuid4()
    # 2000-01-01 00:00:00.010 UTC, and 1 us before 2000-01-01 (floor: the millisecond before)
    sent = [(10_000).to_bytes(8, "big", signed=True), (-1).to_bytes(8, "big", signed=True)]
    (a,) = impl.claimed_from_rows([(u, "t", b"{}", 3, 1, 5, 1000, "{}", *sent)], "tok")
    assert a == ClaimedActivity(u.hex, "t", b"{}", 3, 1, 5, 1000, "{}", "tok", 946_684_800_010, 946_684_799_999)
    assert impl.ack_params([Ack("i", "c", 1, b'{"r":1}'), Ack("j", "d", 2, None, "boom", 99)]) == (
        ["i", "j"], ["c", "d"], [1, 2], ['{"r":1}', None], [None, "boom"], [0, 99]
    )
    assert impl.lease_params([LeaseRef("i", "c"), LeaseRef("j", "d")]) == (["i", "j"], ["c", "d"])
    cols = impl.enqueue_params([NewActivity("i", "t", b"[1]", idempotency_key="k")])
    assert cols == (["i"], ["t"], ["[1]"], [2], [3], [300_000], [0], ["{}"], ["k"])
    with pytest.raises(UnicodeDecodeError):
        impl.ack_params([Ack("i", "c", 1, b"\xff")])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    ("us", "ms"),
    [
        (0, 946_684_800_000), (999, 946_684_800_000), (1000, 946_684_800_001), (-1, 946_684_799_999),
        (-1000, 946_684_799_999), (-1001, 946_684_799_998), (-946_684_800_000_000, 0),
        (-(2**63), -(2**63) // 1000 + 946_684_800_000), (2**63 - 1, (2**63 - 1) // 1000 + 946_684_800_000),
    ],
)
def test_epoch_ms_floors_microseconds_since_2000(impl: ModuleType, us: int, ms: int) -> None:
    assert impl.epoch_ms(us.to_bytes(8, "big", signed=True)) == ms
    assert impl.epoch_ms(bytearray(us.to_bytes(8, "big", signed=True))) == ms


@pytest.mark.parametrize("impl", IMPLS)
def test_epoch_ms_refuses_another_length(impl: ModuleType) -> None:
    with pytest.raises(ValueError, match="8 bytes"):
        impl.epoch_ms(b"\x00" * 4)


class _Duck:
    """Not a Struct: the compiled module takes its getattr path."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


@needs_compiled
def test_duck_typed_and_subclassed_items_agree() -> None:
    assert COMPILED is not None

    class SubAck(Ack, frozen=True, gc=False):
        pass

    ducks: list[Any] = [_Duck(id="a", claim_token="t", outcome=1, result=b"1", error=None, retry_at_ms=0),
                        SubAck("b", "u", 2, None, "e", 5)]
    assert outcome(COMPILED.ack_params, ducks) == outcome(_rows_py.ack_params, ducks)
    # first error in column order: the bad result of item 1 before the missing error field of item 0
    broken: list[Any] = [_Duck(id="a", claim_token="t", outcome=1, result=None, retry_at_ms=0),
                         _Duck(id="b", claim_token="t", outcome=1, result=b"\xff", error=None, retry_at_ms=0)]
    got = outcome(COMPILED.ack_params, broken)
    assert got[0] == "UnicodeDecodeError" and got == outcome(_rows_py.ack_params, broken)
    leases: list[Any] = [_Duck(id="a", claim_token="t"), LeaseRef("b", "u")]
    assert outcome(COMPILED.lease_params, leases) == outcome(_rows_py.lease_params, leases)
    items: list[Any] = [NewActivity("i", "t", b"{}"), _Duck(id="j", activity_type="t", payload=b"\xff")]
    got = outcome(COMPILED.enqueue_params, items)
    assert got[0] == "UnicodeDecodeError" and got == outcome(_rows_py.enqueue_params, items)
    wrong: list[Any] = [NewActivity("i", "t", "not-bytes"), NewActivity("j", "t", b"{}", metadata=b"\xff")]  # type: ignore[arg-type]
    assert outcome(COMPILED.enqueue_params, wrong) == outcome(_rows_py.enqueue_params, wrong)
