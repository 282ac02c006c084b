"""``Deadlines.call`` (compiled and pure) behaves as ``asyncio.timeout`` around the handler."""

from __future__ import annotations

import asyncio
import importlib
from types import ModuleType
from typing import Any

import pytest

from runnerq_fast.engine import _deadline_py


def _compiled() -> ModuleType | None:
    try:
        return importlib.import_module("runnerq_fast.engine._deadline")
    except ImportError:
        return None


COMPILED = _compiled()
IMPLS = [
    pytest.param(_deadline_py, id="pure"),
    pytest.param(COMPILED, id="compiled", marks=pytest.mark.skipif(COMPILED is None, reason="not built")),
]


async def echo(payload: Any, ctx: Any) -> Any:
    await asyncio.sleep(0)
    return (payload, ctx)


async def sleeper(payload: float, ctx: Any) -> str:
    await asyncio.sleep(payload)
    return "woke"


async def boom(payload: Any, ctx: Any) -> None:
    raise ValueError("boom")


async def swallow_cancel(payload: float, ctx: Any) -> str:
    try:
        await asyncio.sleep(payload)
    except asyncio.CancelledError:
        return "swallowed"
    return "woke"


async def cancel_to_error(payload: float, ctx: Any) -> str:
    try:
        await asyncio.sleep(payload)
    except asyncio.CancelledError:
        raise KeyError("converted") from None
    return "woke"


def call(impl: ModuleType, *args: Any) -> Any:
    return impl.Deadlines(asyncio.get_running_loop()).call(*args)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("timeout", [None, 5.0])
async def test_returns_the_result(impl: ModuleType, timeout: float | None) -> None:
    assert await call(impl, echo, 1, "ctx", timeout) == (1, "ctx")
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("timeout", [0.01, 0.0, -1.0])
async def test_expiry_is_a_timeout_error(impl: ModuleType, timeout: float) -> None:
    with pytest.raises(TimeoutError) as info:
        await call(impl, sleeper, 10.0, None, timeout)
    assert isinstance(info.value.__cause__, asyncio.CancelledError)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0)  # the task is usable afterwards: no cancellation left pending


@pytest.mark.parametrize("impl", IMPLS)
async def test_handler_errors_pass_through(impl: ModuleType) -> None:
    with pytest.raises(ValueError, match="boom"):
        await call(impl, boom, None, None, 5.0)


@pytest.mark.parametrize("impl", IMPLS)
async def test_a_swallowed_or_converted_cancel_leaves_no_pending_cancellation(impl: ModuleType) -> None:
    assert await call(impl, swallow_cancel, 10.0, None, 0.01) == "swallowed"
    with pytest.raises(KeyError):
        await call(impl, cancel_to_error, 10.0, None, 0.01)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    assert await call(impl, sleeper, 0.02, None, 5.0) == "woke"


@pytest.mark.parametrize("impl", IMPLS)
async def test_an_outside_cancel_stays_a_cancel(impl: ModuleType) -> None:
    task = asyncio.ensure_future(call(impl, sleeper, 10.0, None, 5.0))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


@pytest.mark.parametrize("impl", IMPLS)
async def test_an_outside_cancel_racing_the_expiry_stays_a_cancel(impl: ModuleType) -> None:
    async def run() -> Any:
        return await call(impl, sleeper, 10.0, None, 0.05)

    task = asyncio.ensure_future(run())
    await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    loop.call_later(0.04, task.cancel)  # lands together with the 0.05 s expiry
    await asyncio.sleep(0.06)
    with pytest.raises((asyncio.CancelledError, TimeoutError)):
        await task


@pytest.mark.parametrize("impl", IMPLS)
def test_outside_a_running_loop_is_an_error(impl: ModuleType) -> None:
    loop = asyncio.new_event_loop()
    try:
        coro = impl.Deadlines(loop).call(echo, 1, None, 1.0)
        with pytest.raises(RuntimeError, match="no running event loop"):
            coro.send(None)
    finally:
        loop.close()


@pytest.mark.parametrize("impl", IMPLS)
async def test_calls_share_slot_timers_and_expire_in_time(impl: ModuleType) -> None:
    loop = asyncio.get_running_loop()
    deadlines = impl.Deadlines(loop)
    started = loop.time()
    outcomes = await asyncio.gather(
        *(deadlines.call(sleeper, 10.0, None, 0.05) for _ in range(50)),
        # the quick calls get 0.5 s, not 0.05 s: uvloop runs due timers before ready callbacks, so a
        # process stalled for 50 ms on a loaded CI machine (seen) expired them between their two steps
        *(deadlines.call(echo, i, None, 0.5) for i in range(50)),
        return_exceptions=True,
    )
    elapsed = loop.time() - started
    assert all(isinstance(o, TimeoutError) for o in outcomes[:50])
    assert outcomes[50:] == [(i, None) for i in range(50)]
    assert elapsed >= 0.05 - 0.002  # never early (beyond uvloop's millisecond timer rounding)
    assert elapsed < 0.5  # the sleepers' shared timer fired long before the quick calls' one
    # calls made across a slot boundary use two slots; each timer removes its slot when it fires,
    # also a slot whose calls all returned before it
    await asyncio.sleep(started + 0.5 + 0.03 - loop.time())
    assert deadlines.pending_slots == 0
    slow = asyncio.ensure_future(deadlines.call(sleeper, 10.0, None, 300.0))
    await asyncio.sleep(0)
    assert deadlines.pending_slots == 1
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow


@pytest.mark.parametrize("impl", IMPLS)
async def test_a_given_task_is_the_one_cancelled(impl: ModuleType) -> None:
    me = asyncio.current_task()
    with pytest.raises(TimeoutError):
        await call(impl, sleeper, 10.0, None, 0.01, me)
    assert me is not None and me.cancelling() == 0
