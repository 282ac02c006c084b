"""The engine's per-activity path (compiled and pure) gives the same acks, calls and counters."""

from __future__ import annotations

import asyncio
import importlib
import re
from types import ModuleType, SimpleNamespace
from typing import Any, cast

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runnerq_fast.codec import decode_json
from runnerq_fast.engine import _deadline_py, _worker_py
from runnerq_fast.engine.hooks import ActivityInfo
from runnerq_fast.engine.outcomes import Outcomes, Registered
from runnerq_fast.errors import NonRetryableError, RetryableError
from runnerq_fast.models import ClaimedActivity


def _compiled(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"runnerq_fast.{name}")
    except ImportError:
        return None


COMPILED = _compiled("engine._worker")
PAIRS: list[tuple[ModuleType, ModuleType]] = [(_worker_py, _deadline_py)]
if COMPILED is not None:
    PAIRS.append((COMPILED, importlib.import_module("runnerq_fast.engine._deadline")))
IMPLS = [
    pytest.param((_worker_py, _deadline_py), id="pure"),
    pytest.param(
        (COMPILED, _compiled("engine._deadline")),
        id="compiled",
        marks=pytest.mark.skipif(COMPILED is None, reason="not built"),
    ),
]

BEHAVIOURS = ["none", "value", "unencodable", "nonretryable", "retryable", "value_error", "timeout",
              "self_cancel", "sleep_past_timeout", "unknown_type", "bad_payload", "sync", "progress", "typed",
              "typed_mismatch"]


class _Handler:
    __slots__ = ("decode", "fn", "is_async", "payload_type")

    def __init__(self, fn: Any, is_async: bool = True) -> None:
        self.fn = fn
        self.is_async = is_async
        self.decode = decode_json
        self.payload_type = None


class _Job(msgspec.Struct):
    kind: str
    n: int


async def _typed(payload: _Job, ctx: Any) -> Any:
    assert type(payload) is _Job
    return {"n": payload.n}


async def _handler(payload: Any, ctx: Any) -> Any:
    kind = payload["kind"]
    if kind == "none":
        return None
    if kind == "value":
        return {"n": payload["n"], "id": ctx.activity_id}
    if kind == "progress":  # both twins hand the value to the engine's buffer under the attempt's claim
        ctx.set_progress({"n": payload["n"]})
        ctx.set_progress(0.5)
        return ctx.progress
    if kind == "unencodable":
        return {"x": float("nan")}
    if kind == "nonretryable":
        raise NonRetryableError("no")
    if kind == "retryable":
        raise RetryableError("later", retry_after=1.5)
    if kind == "value_error":
        raise ValueError("bad\x00value")
    if kind == "timeout":
        raise TimeoutError("mine")
    if kind == "self_cancel":
        raise asyncio.CancelledError("inner")
    if kind == "sleep_past_timeout":
        await asyncio.sleep(1)
    if kind == "swallow_cancel":
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            return "swallowed"
    if kind == "long":
        await asyncio.sleep(5)
    return None


def _activity(i: int, kind: str, retry_count: int) -> ClaimedActivity:
    atype = {"unknown_type": "nope", "sync": "sync", "typed": "typed", "typed_mismatch": "typed"}.get(kind, "t")
    payload = b"{not json" if kind == "bad_payload" else b'{"kind": "%s", "n": %d}' % (kind.encode(), i)
    if kind == "typed_mismatch":
        payload = b'{"kind": "typed_mismatch", "n": "%d"}' % i
    timeout_ms = 20 if kind == "sleep_past_timeout" else (0 if i % 3 == 0 else 60_000)
    return ClaimedActivity(f"a{i}", atype, payload, 2, retry_count, 1, timeout_ms, b"{}", f"tok{i}", 0, 0)


class _Progress:
    """A stand-in for the engine's progress buffer that logs each value."""

    def __init__(self, log: list[tuple[Any, ...]]) -> None:
        self.log = log

    def put(self, activity_id: str, claim_token: str, progress: str) -> None:
        self.log.append(("progress", activity_id, claim_token, progress))


def _outcomes(deadline_mod: ModuleType, hooks: tuple[Any, ...], batch: int) -> Any:
    """A stand-in for the engine's :class:`Outcomes` that logs each classification."""
    log: list[tuple[Any, ...]] = []

    async def call_sync(fn: Any, payload: Any, ctx: Any, timeout: Any) -> Any:
        log.append(("sync", ctx.activity_id, timeout))
        return {"sync": True}

    out = SimpleNamespace(
        handlers={"t": _Handler(_handler), "sync": _Handler(None, False), "typed": Registered(_typed, "typed")},
        deadlines=deadline_mod.Deadlines(asyncio.get_running_loop()),
        executor=None,
        cancellation=asyncio.Event(),
        hooks=hooks,
        slot_free=asyncio.Event(),
        busy=0,
        type_busy=None,
        type_done=lambda activity_type: log.append(("type_done", activity_type)),
        acks=[],
        ack_ready=asyncio.Event(),
        ack_full=asyncio.Event(),
        ack_batch_size=batch,
        stats={"completed": 0, "cancelled": 0},
        metrics_on=True,
        done_metrics=[],  # completed attempts for the metrics: (type, seconds)
        stopping=False,
        release=[],
        fail=lambda a, err, ran=None: log.append(("fail", a.id, err)),
        dead_letter=lambda a, err, ran=None: log.append(("dead", a.id, err)),
        retry_or_dead=lambda a, err, after, ran=None: log.append(("retry", a.id, err, after)),
        call_sync=call_sync,
        log=log,
        running={},
        cancel_ids=set(),
        lost_ids=set(),
        progress=_Progress(log),
    )
    out.push_ack = lambda ack: Outcomes.push_ack(cast(Outcomes, out), ack)  # the real buffering
    out.cancelled = lambda a, ctx=None: Outcomes.cancelled(cast(Outcomes, out), a, ctx)
    out.request_cancel = lambda ids, inflight: Outcomes.request_cancel(cast(Outcomes, out), ids, inflight)
    out.lease_lost = lambda ids, inflight: Outcomes.lease_lost(cast(Outcomes, out), ids, inflight)
    out.abandoned = lambda a, ctx=None, exc=None: Outcomes.abandoned(cast(Outcomes, out), a, ctx, exc)
    return out


class _Hooks:
    def __init__(self, log: list[tuple[Any, ...]]) -> None:
        self.log = log

    def on_processing(self, activity: ActivityInfo) -> None:
        self.log.append(("hook_processing", activity.id))

    async def on_processed(self, activity: ActivityInfo, duration: float) -> None:
        self.log.append(("hook_processed", activity.id))


async def _drain(impl: tuple[ModuleType, ModuleType], items: list[ClaimedActivity], with_hooks: bool,
                 workers: int, batch: int, limited: bool = False) -> tuple[Any, ...]:
    worker, deadline = impl
    eng = _outcomes(deadline, (), batch)
    if limited:
        eng.type_busy = {"t": 0}
    if with_hooks:
        eng.hooks = (_Hooks(eng.log),)
    local = worker.Handoff(asyncio.get_running_loop())
    tasks = [asyncio.create_task(worker.worker_loop(eng, local)) for _ in range(workers)]
    await asyncio.sleep(0)
    inflight: dict[str, ClaimedActivity] = {}
    eng.busy += len(items)
    local.put_batch(items, inflight)
    for _ in tasks:
        local.put_nowait(None)
    await asyncio.gather(*tasks)
    acks = sorted((a.id, a.claim_token, a.outcome, a.result, a.error, a.retry_at_ms) for a in eng.acks)
    # the elapsed time in a timeout's error text is measured, not computed
    log = sorted((tuple(re.sub(r"after [0-9.]+ s", "after T s", x) if isinstance(x, str) else x for x in e)
                  for e in eng.log), key=repr)
    held = dict(inflight)
    worker.settle(inflight, eng.acks, eng.acks[:1])
    return (acks, log, eng.stats, eng.busy, eng.slot_free.is_set(), eng.ack_ready.is_set(),
            eng.ack_full.is_set(), sorted(held), sorted(inflight), local.empty())


@given(
    kinds=st.lists(st.tuples(st.sampled_from(BEHAVIOURS), st.integers(0, 1)), max_size=25),
    with_hooks=st.booleans(),
    workers=st.integers(1, 6),
    batch=st.integers(1, 10),
)
@settings(max_examples=40, deadline=None)
def test_worker_paths_agree(kinds: list[tuple[str, int]], with_hooks: bool, workers: int, batch: int) -> None:
    items = [_activity(i, k, r) for i, (k, r) in enumerate(kinds)]
    results = [asyncio.run(_drain(impl, items, with_hooks, workers, batch)) for impl in PAIRS]
    for other in results[1:]:
        assert other == results[0]
    assert not any(e[0] == "type_done" for e in results[0][1])  # no per-type accounting without limits


@pytest.mark.parametrize("impl", IMPLS)
def test_every_activity_frees_its_type_slot_under_limits(impl: tuple[ModuleType, ModuleType]) -> None:
    kinds = ["value", "retryable", "unknown_type", "bad_payload", "sync", "timeout", "none"]
    items = [_activity(i, k, 0) for i, k in enumerate(kinds)]
    result = asyncio.run(_drain(impl, items, False, 3, 4, limited=True))
    freed = sorted(e[1] for e in result[1] if e[0] == "type_done")
    assert freed == sorted(a.activity_type for a in items)


@pytest.mark.parametrize("impl", IMPLS)
def test_handoff_is_a_fifo_with_getters(impl: tuple[ModuleType, ModuleType]) -> None:
    worker = impl[0]

    async def go() -> list[Any]:
        h = worker.Handoff(asyncio.get_running_loop())
        assert h.empty() and len(h) == 0
        with pytest.raises(asyncio.QueueEmpty):
            h.get_nowait()
        getter = asyncio.create_task(h.get())
        cancelled = asyncio.create_task(h.get())
        await asyncio.sleep(0)
        cancelled.cancel()
        h.put_nowait(None)
        inflight: dict[str, ClaimedActivity] = {}
        items = [_activity(i, "none", 0) for i in range(3)]
        h.put_batch(items, inflight)
        got = [await getter, h.get_nowait(), await h.get(), len(h)]
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        return [*got, sorted(inflight)]

    assert asyncio.run(go()) == [None, _activity(0, "none", 0), _activity(1, "none", 0), 1, ["a0", "a1", "a2"]]


@pytest.mark.parametrize("impl", IMPLS)
def test_shutdown_cancellation_releases(impl: tuple[ModuleType, ModuleType]) -> None:
    worker, deadline = impl

    async def go() -> tuple[Any, ...]:
        eng = _outcomes(deadline, (), 10)
        local = worker.Handoff(asyncio.get_running_loop())
        a = ClaimedActivity("x", "t", b'{"kind": "sleep_past_timeout", "n": 0}', 2, 0, 3, 0, b"{}", "tok", 0, 0)
        task = asyncio.create_task(worker.worker_loop(eng, local))
        eng.busy = 1
        local.put_batch([a], {})
        await asyncio.sleep(0.01)
        eng.stopping = True
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return eng.release, eng.acks, eng.busy

    release, acks, busy = asyncio.run(go())
    assert [(r.id, r.claim_token) for r in release] == [("x", "tok")]
    assert acks == [] and busy == 0


@pytest.mark.parametrize("with_hooks", [False, True], ids=["inline", "run_one"])
@pytest.mark.parametrize("impl", IMPLS)
def test_a_lost_lease_stops_the_handler_without_an_ack(impl: tuple[ModuleType, ModuleType], with_hooks: bool) -> None:
    """Issue 11 item 11: a lost lease cancels a running async handler (no ack: the claim is gone), a
    claimed one never starts, one that swallows the cancellation still acks (the store rejects it),
    and the worker task is left as it was."""
    worker, deadline = impl

    async def go() -> tuple[Any, ...]:
        eng = _outcomes(deadline, (), 1)
        if with_hooks:
            eng.hooks = (_Hooks(eng.log),)
        local = worker.Handoff(asyncio.get_running_loop())
        task = asyncio.create_task(worker.worker_loop(eng, local))
        inflight: dict[str, ClaimedActivity] = {}
        items = [
            ClaimedActivity("long", "t", b'{"kind": "long", "n": 0}', 2, 0, 3, 60_000, b"{}", "t1", 0, 0),
            ClaimedActivity("swallow", "t", b'{"kind": "swallow_cancel", "n": 0}', 2, 0, 3, 0, b"{}", "t2", 0, 0),
            ClaimedActivity("queued", "t", b'{"kind": "value", "n": 0}', 2, 0, 3, 0, b"{}", "t3", 0, 0),
            ClaimedActivity("after", "t", b'{"kind": "value", "n": 1}', 2, 0, 3, 0, b"{}", "t4", 0, 0),
        ]
        eng.busy = len(items)
        local.put_batch(items, inflight)
        await asyncio.sleep(0.02)
        assert set(eng.running) == {"long"}
        ctx = eng.running["long"]
        assert eng.lease_lost(["long", "queued"], inflight) == 1 and ctx.lease_lost
        assert eng.lease_lost(["long"], inflight) == 0  # told once
        assert eng.cancel_ids == {"queued"} and eng.lost_ids == {"queued"}
        await asyncio.sleep(0.02)
        assert set(eng.running) == {"swallow"}
        assert eng.lease_lost(["swallow"], inflight) == 1
        await asyncio.sleep(0.02)
        local.put_nowait(None)
        await asyncio.wait_for(task, 2)
        outcomes = [(a.id, a.outcome) for a in eng.acks]
        return outcomes, task.cancelling(), eng.busy, eng.cancel_ids, eng.lost_ids, eng.stats["completed"]

    outcomes, cancelling, busy, left, lost, completed = asyncio.run(go())
    assert outcomes == [("swallow", 1), ("after", 1)]
    assert cancelling == 0 and busy == 0 and left == set() and lost == set()
    assert completed == 2


@pytest.mark.parametrize("with_hooks", [False, True], ids=["inline", "run_one"])
@pytest.mark.parametrize("impl", IMPLS)
def test_cancel_request_stops_the_handler_and_acks_cancelled(
    impl: tuple[ModuleType, ModuleType], with_hooks: bool
) -> None:
    """An operator's cancel (reported by a heartbeat) cancels a running async handler, also one that
    swallows the cancellation, ends a claimed one before it starts, and leaves the worker task as it was."""
    worker, deadline = impl

    async def go() -> tuple[Any, ...]:
        eng = _outcomes(deadline, (), 1)
        if with_hooks:
            eng.hooks = (_Hooks(eng.log),)
        local = worker.Handoff(asyncio.get_running_loop())
        task = asyncio.create_task(worker.worker_loop(eng, local))
        inflight: dict[str, ClaimedActivity] = {}
        items = [
            ClaimedActivity("long", "t", b'{"kind": "long", "n": 0}', 2, 0, 3, 60_000, b"{}", "t1", 0, 0),
            ClaimedActivity("swallow", "t", b'{"kind": "swallow_cancel", "n": 0}', 2, 0, 3, 0, b"{}", "t2", 0, 0),
            ClaimedActivity("queued", "t", b'{"kind": "value", "n": 0}', 2, 0, 3, 0, b"{}", "t3", 0, 0),
            ClaimedActivity("after", "t", b'{"kind": "value", "n": 1}', 2, 0, 3, 0, b"{}", "t4", 0, 0),
        ]
        eng.busy = len(items)
        local.put_batch(items, inflight)
        await asyncio.sleep(0.02)
        assert set(eng.running) == {"long"}
        assert eng.request_cancel(["long", "queued"], inflight) == 1
        assert eng.cancel_ids == {"queued"}
        await asyncio.sleep(0.02)
        assert set(eng.running) == {"swallow"}
        assert eng.request_cancel(["swallow"], inflight) == 1
        await asyncio.sleep(0.02)
        local.put_nowait(None)
        await asyncio.wait_for(task, 2)
        outcomes = [(a.id, a.outcome) for a in eng.acks]
        timed = [t for t, _ in eng.done_metrics]
        return outcomes, task.cancelling(), eng.busy, eng.cancel_ids, eng.stats, eng.log, timed

    outcomes, cancelling, busy, left, stats, log, timed = asyncio.run(go())
    assert outcomes == [("long", 5), ("swallow", 5), ("queued", 5), ("after", 1)]
    assert cancelling == 0 and busy == 0 and left == set()
    assert stats == {"completed": 1, "cancelled": 3}
    assert timed == ["t"]  # only the completed attempt's run time goes to the metrics
    assert not [e for e in log if e[0] in ("retry", "fail", "dead")]


@pytest.mark.parametrize("impl", IMPLS)
def test_a_batch_wakes_workers_only_for_items_left_waiting(impl: tuple[ModuleType, ModuleType]) -> None:
    """Issue 17: a batch put wakes one waiting worker at once and the others one loop step later, as
    many as items are left then. Workers that take every item without awaiting (handlers that end at
    once) leave nothing for the others, who are then not woken to find the hand-off empty; workers
    that await in between get an item each."""
    worker = impl[0]

    class CountingLoop:
        def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
            self.loop, self.futures = loop, 0

        def create_future(self) -> asyncio.Future[None]:
            self.futures += 1
            return self.loop.create_future()

        def call_soon(self, *args: Any) -> asyncio.Handle:
            return self.loop.call_soon(*args)

    async def go(awaits: bool) -> tuple[int, list[int], int]:
        loop = CountingLoop(asyncio.get_running_loop())
        h = worker.Handoff(loop)
        taken: list[int] = []

        async def consumer(i: int) -> None:
            while True:
                item = await h.get()
                if item is None:
                    return
                taken.append(i)
                if awaits:
                    await asyncio.sleep(0)
                else:
                    while not h.empty() and (nxt := h.get_nowait()) is not None:
                        taken.append(i)
                    if nxt is None:
                        return

        tasks = [asyncio.create_task(consumer(i)) for i in range(8)]
        await asyncio.sleep(0)
        assert loop.futures == 8
        h.put_batch([_activity(i, "none", 0) for i in range(8)], {})
        for _ in range(5):
            await asyncio.sleep(0)
        woken = loop.futures - 8
        for _ in tasks:
            h.put_nowait(None)
        await asyncio.gather(*tasks)
        return woken, sorted(set(taken)), len(taken)

    woken, ran, count = asyncio.run(go(awaits=False))
    assert count == 8 and len(ran) == 1 and woken <= 2  # one worker ran them all; at most one other woke
    woken, ran, count = asyncio.run(go(awaits=True))
    assert count == 8 and len(ran) >= 7  # the items are spread (the first worker may take a second one)


@pytest.mark.parametrize("with_hooks", [False, True], ids=["inline", "run_one"])
@pytest.mark.parametrize("impl", IMPLS)
def test_a_typed_handler_gets_its_type_and_a_mismatch_is_dead_lettered_naming_the_field(
    impl: tuple[ModuleType, ModuleType], with_hooks: bool
) -> None:
    """Both twins, on both paths of the compiled worker (inline without hooks, ``run_one`` with them)."""
    items = [_activity(0, "typed", 0), _activity(1, "typed_mismatch", 0), _activity(2, "value", 0)]
    acks, log = asyncio.run(_drain(impl, items, with_hooks, 2, 10))[:2]
    assert [(a[0], a[3]) for a in acks if a[0] != "a1"] == [("a0", b'{"n":0}'), ("a2", b'{"n":2,"id":"a2"}')]
    dead = [e for e in log if e[0] == "dead"]
    assert dead == [("dead", "a1", "payload does not match _Job, the handler's payload type: Expected `int`, got "
                                   "`str` - at `$.n`")]
