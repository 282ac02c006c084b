"""Batch enqueues through the executor: what an item of a batch may be, and what a bad one does."""

from __future__ import annotations

import pytest

import runnerq_fast as rq


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
