"""Activity ids: UUIDv7 layout, strict order within a process, batches made at once."""

from __future__ import annotations

import time
import uuid

import pytest

from runnerq_fast import ids
from runnerq_fast.ids import new_activity_id, new_activity_ids


def _check(values: list[str]) -> None:
    for v in values:
        assert len(v) == 32 and v == v.lower() and int(v, 16) >= 0
        u = uuid.UUID(v)
        assert u.version == 7 and u.variant == uuid.RFC_4122
    assert values == sorted(values) and len(set(values)) == len(values)


def test_single_and_batch_ids_are_uuid7_and_strictly_increasing_together() -> None:
    values = [new_activity_id() for _ in range(3)] + new_activity_ids(700) + [new_activity_id()] + new_activity_ids(2)
    _check(values)


def test_an_id_carries_the_current_millisecond() -> None:
    before = time.time_ns() // 1_000_000
    (v,) = new_activity_ids(1)
    after = time.time_ns() // 1_000_000
    assert before <= int(v[:12], 16) <= after + 1


def test_new_activity_ids_of_nothing_is_empty() -> None:
    assert new_activity_ids(0) == []
    assert new_activity_ids(-3) == []


def test_a_batch_past_the_counter_borrows_the_next_millisecond(monkeypatch: pytest.MonkeyPatch) -> None:
    frozen = 1_800_000_000_000 * 1_000_000  # far ahead of every id made so far in this process
    monkeypatch.setattr(ids, "_last_seq", ids._last_seq)  # restored afterwards: later ids go by the real clock
    monkeypatch.setattr(time, "time_ns", lambda: frozen)
    batch = new_activity_ids(5000)  # more than the 4096 counter values of one millisecond
    _check(batch)
    ms = frozen // 1_000_000
    assert {int(v[:12], 16) for v in batch} == {ms, ms + 1}
    assert batch[4095][12:16] == "7fff" and batch[4096][:16] == f"{ms + 1:012x}7000"
    after = new_activity_id()  # the clock has not moved: the next id goes on from the borrowed millisecond
    assert after > batch[-1] and int(after[:12], 16) == ms + 1


def test_the_random_half_varies_in_all_its_62_bits() -> None:
    batch = new_activity_ids(4000)
    lows = [int(v[16:], 16) for v in batch]
    assert all(lo >> 62 == 0b10 for lo in lows)  # the variant
    seen = 0
    for lo in lows:
        seen |= lo
    assert seen == (1 << 64) - 1 - (1 << 62)  # every random bit was 1 at least once, the variant's 0 never
