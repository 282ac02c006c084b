"""Activity ids: UUIDv7 layout, strict order within a process, batches made at once; compiled and pure twins."""

from __future__ import annotations

import importlib
import time
import uuid
from types import ModuleType

import pytest

from runnerq_fast import _ids_py, ids


def _compiled() -> ModuleType | None:
    try:
        return importlib.import_module("runnerq_fast._ids")
    except ImportError:
        return None


COMPILED = _compiled()
needs_compiled = pytest.mark.skipif(COMPILED is None, reason="the compiled ids module is not built")
IMPLS = [pytest.param(_ids_py, id="pure"), pytest.param(COMPILED, id="compiled", marks=needs_compiled)]


def _check(values: list[str]) -> None:
    for v in values:
        assert type(v) is str and len(v) == 32 and v == v.lower() and int(v, 16) >= 0
        u = uuid.UUID(v)
        assert u.version == 7 and u.variant == uuid.RFC_4122
    assert values == sorted(values) and len(set(values)) == len(values)


def test_the_selector_exports_the_active_twin() -> None:
    from runnerq_fast import speedups

    assert ids.new_activity_ids is (COMPILED if speedups.enabled else _ids_py).new_activity_ids  # type: ignore[union-attr]


@pytest.mark.parametrize("impl", IMPLS)
def test_single_and_batch_ids_are_uuid7_and_strictly_increasing_together(impl: ModuleType) -> None:
    one, many = impl.new_activity_id, impl.new_activity_ids
    values = [one() for _ in range(3)] + many(700) + [one()] + many(2) + many(1)
    _check(values)


@pytest.mark.parametrize("impl", IMPLS)
def test_an_id_carries_the_current_millisecond(impl: ModuleType) -> None:
    before = time.time_ns() // 1_000_000
    (v,) = impl.new_activity_ids(1)
    w = impl.new_activity_id()
    after = time.time_ns() // 1_000_000
    assert before <= int(v[:12], 16) <= int(w[:12], 16) <= after + 1


@pytest.mark.parametrize("impl", IMPLS)
def test_new_activity_ids_of_nothing_is_empty(impl: ModuleType) -> None:
    assert impl.new_activity_ids(0) == []
    assert impl.new_activity_ids(-3) == []


@pytest.mark.parametrize("impl", IMPLS)
def test_a_batch_past_the_counter_borrows_the_next_millisecond(
    impl: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Frozen 30 ms ahead: later ids (after the test) go by the real clock again within ~30 ms, in order meanwhile.
    frozen = (int(impl.new_activity_id()[:12], 16) + 30) * 1_000_000  # past every id this twin made
    monkeypatch.setattr(time, "time_ns", lambda: frozen)
    batch = impl.new_activity_ids(5000)  # more than the 4096 counter values of one millisecond
    _check(batch)
    ms = frozen // 1_000_000
    assert {int(v[:12], 16) for v in batch} == {ms, ms + 1}
    assert batch[0][:16] == f"{ms:012x}7000" and batch[4095][12:16] == "7fff"
    assert batch[4096][:16] == f"{ms + 1:012x}7000"
    after = impl.new_activity_id()  # the clock has not moved: the next id goes on from the borrowed millisecond
    assert after > batch[-1] and after[:16] == f"{ms + 1:012x}7{5000 - 4096:03x}"


@pytest.mark.parametrize("impl", IMPLS)
def test_the_random_half_varies_in_all_its_62_bits(impl: ModuleType) -> None:
    batch = impl.new_activity_ids(4000) + [impl.new_activity_id() for _ in range(4000)]
    lows = [int(v[16:], 16) for v in batch]
    assert all(lo >> 62 == 0b10 for lo in lows)  # the variant
    seen = 0
    for lo in lows:
        seen |= lo
    assert seen == (1 << 64) - 1 - (1 << 62)  # every random bit was 1 at least once, the variant's 0 never
