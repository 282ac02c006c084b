"""Batch enqueues through the executor: what an item of a batch may be, and what a bad one does."""

from __future__ import annotations

import msgspec
import pytest

import runnerq_fast as rq
from runnerq_fast.models import NewActivity


async def test_enqueue_many_futures_takes_tuples_as_enqueue_many_does() -> None:
    backend = rq.MemoryBackend()
    ex = rq.ActivityExecutor(backend, "q")
    futures = await ex.enqueue_many_futures([("t", 1), ex.activity("t").payload(2)])  # was AttributeError on the tuple
    assert len(futures) == 2 and all(f.created for f in futures)
    assert [(await backend.get_activity(f.activity_id)) is not None for f in futures] == [True, True]


@pytest.mark.parametrize("bad", ["t", ("t",), ("t", 1, 2), None])
async def test_a_batch_item_of_the_wrong_shape_is_refused_and_nothing_is_stored(bad: object) -> None:
    backend = rq.MemoryBackend()
    ex = rq.ActivityExecutor(backend, "q")
    for enqueue in (ex.enqueue_many, ex.enqueue_many_futures):
        with pytest.raises(rq.InvalidActivityError, match="item 1 of the batch"):  # was ValueError / TypeError
            await enqueue([("t", 1), bad])  # type: ignore[list-item]
    assert (await backend.stats("q")).total == 0


class _Capture(rq.MemoryBackend):
    """Keeps the NewActivity items each enqueue was given."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[NewActivity] = []

    async def enqueue(self, queue, items, *, connection=None):  # type: ignore[no-untyped-def]
        self.items.extend(items)
        return await super().enqueue(queue, items, connection=connection)


def _without_id(item: NewActivity) -> tuple[object, ...]:
    fields = msgspec.structs.asdict(item)
    del fields["id"]
    return tuple(sorted(fields.items()))


@pytest.mark.parametrize("inherited", [None, {"tenant": "t1"}, b'{"tenant":"t2"}'])
async def test_a_tuple_item_is_built_as_a_builder_with_defaults_is(inherited: object) -> None:
    backend = _Capture()
    cfg = rq.WorkerConfig(default_timeout=12.5, default_max_retries=7, idempotency_ttl=60.0)
    ex = rq.ActivityExecutor(backend, "q", cfg)
    if inherited is not None:
        ex = ex.child("0" * 32, inherited)  # type: ignore[arg-type]
    payload = {"a": [1, 2]}
    ids = await ex.enqueue_many([("t", payload), ex.activity("t").payload(payload), ("u", None), ("t", payload)])
    assert [it.id for it in backend.items] == ids and len(set(ids)) == 4 and ids == sorted(ids)
    by_tuple, by_builder, other, again = backend.items
    assert _without_id(by_tuple) == _without_id(by_builder) == _without_id(again)
    assert (other.activity_type, other.payload) == ("u", b"null")
    assert by_tuple.payload == b'{"a":[1,2]}' and by_tuple.timeout_ms == 12_500 and by_tuple.max_retries == 7
    assert by_tuple.idempotency_ttl_ms == 60_000 and by_tuple.parent_id == (None if inherited is None else "0" * 32)
    expected = {} if inherited is None else {"tenant": "t1"} if isinstance(inherited, dict) else {"tenant": "t2"}
    assert msgspec.json.decode(by_tuple.metadata) == expected


@pytest.mark.parametrize("bad", [("", 1), (7, 1), ("t", float("nan")), ("t", {1: 2})])
async def test_a_bad_tuple_after_good_ones_stores_nothing(bad: tuple[object, object]) -> None:
    backend = rq.MemoryBackend()
    ex = rq.ActivityExecutor(backend, "q")
    with pytest.raises(rq.InvalidActivityError):
        await ex.enqueue_many([("t", 1), ("t", 1), bad])  # type: ignore[list-item]
    assert (await backend.stats("q")).total == 0


async def test_enqueue_many_raises_duplicate_for_a_no_reuse_key_and_stores_the_rest() -> None:
    backend = rq.MemoryBackend()
    ex = rq.ActivityExecutor(backend, "q")
    await ex.activity("t").idempotency_key("k", rq.OnDuplicate.NO_REUSE).execute()
    with pytest.raises(rq.DuplicateActivityError):
        await ex.enqueue_many([("t", 1), ex.activity("t").idempotency_key("k", rq.OnDuplicate.NO_REUSE)])
    assert (await backend.stats("q")).total == 2
