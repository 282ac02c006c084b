"""What awaiting a result gives when the stored result is damaged (a row edited outside this library)."""

from __future__ import annotations

from typing import Any

import pytest

import runnerq_fast as rq
from runnerq_fast.executor import unwrap_result
from tests.conformance import FAST
from tests.damaged_results import DamagedResults


async def test_a_damaged_result_is_a_corrupt_result_error_naming_the_activity() -> None:
    backend = DamagedResults()
    engine = rq.WorkerEngine(backend, **FAST)

    @engine.activity("ok")
    async def ok(payload: Any, ctx: rq.ActivityContext) -> Any:
        return {"doubled": payload * 2}

    async with engine:
        future = await engine.executor.activity("ok").payload(2).execute()
        assert await future.result(timeout=5) == {"doubled": 4}
        backend.damaged = True
        # msgspec.DecodeError escaped from future.result(): neither a RunnerQError nor naming the activity
        with pytest.raises(rq.CorruptResultError, match=future.activity_id) as caught:
            await future.result(timeout=5)
    assert caught.value.activity_id == future.activity_id and "truncated" in caught.value.reason
    assert await future.status() == "completed"


@pytest.mark.parametrize("data", [b'{"a": 1', b"\xff\xfe", "[1, 2] 3"])
def test_unwrap_result_refuses_what_does_not_decode_and_keeps_valid_results(data: bytes | str) -> None:
    with pytest.raises(rq.CorruptResultError):
        unwrap_result(rq.ActivityResult("a1", "completed", data, None))
    assert unwrap_result(rq.ActivityResult("a1", "completed", b'{"a": [1]}', None)) == {"a": [1]}
    assert unwrap_result(rq.ActivityResult("a1", "completed", None, None)) is None
