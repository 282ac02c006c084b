"""Progress (issue 27, item 6): the values accepted, the engine's coalescing buffer, and the readers
(``runnerq-fast inspect``, ``SyncExecutor.progress``, ``testing.make_context``)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import runnerq_fast as rq
from runnerq_fast.backends.memory import MemoryBackend
from runnerq_fast.cli import cli
from runnerq_fast.engine.progress import ProgressBuffer
from runnerq_fast.models import ProgressUpdate
from runnerq_fast.progress import MAX_PROGRESS_BYTES, decode_progress, encode_progress
from runnerq_fast.storage import open_backend
from runnerq_fast.testing import make_context
from tests.conformance import FAST, eventually, new


# ------------------------------------------------------------------ values
@pytest.mark.parametrize(("value", "text"), [(0, "0.0"), (1, "1.0"), (0.5, "0.5"), (1e-9, "1e-09"),
                                             ({}, "{}"), ({"a": [1, None, "é"]}, '{"a":[1,null,"é"]}')])
def test_accepted_values_and_their_text(value: Any, text: str) -> None:
    assert encode_progress(value) == text
    assert decode_progress(text) == value


@pytest.mark.parametrize(("value", "error", "says"), [
    (float("nan"), ValueError, "from 0 to 1"),
    (float("-inf"), ValueError, "from 0 to 1"),
    (-0.001, ValueError, "from 0 to 1"),
    (1.0001, ValueError, "from 0 to 1"),
    (50, ValueError, "from 0 to 1"),
    (True, TypeError, "not bool"),
    ("50%", TypeError, "not str"),
    ([0.5], TypeError, "not list"),
    (None, TypeError, "not NoneType"),
    ({"t": (1, 2)}, rq.InvalidActivityError, 'progress["t"]'),
    ({"x": float("nan")}, rq.InvalidActivityError, 'progress["x"]'),
    ({"big": "x" * MAX_PROGRESS_BYTES}, rq.InvalidActivityError, "8192"),
])
def test_refused_values_say_why(value: Any, error: type[Exception], says: str) -> None:
    with pytest.raises(error) as info:
        encode_progress(value)
    assert says in str(info.value)


@pytest.mark.parametrize("raw", [None, "", "nope", '"text"', "[1]", "true", "null", b"\xff"])
def test_stored_text_that_is_not_progress_reads_as_none(raw: Any) -> None:
    assert decode_progress(raw) is None


def test_make_context_keeps_the_last_value() -> None:
    ctx = make_context()
    assert ctx.progress is None
    ctx.set_progress(0.3)
    ctx.set_progress({"step": 2})
    assert ctx.progress == {"step": 2}
    with pytest.raises(ValueError, match="from 0 to 1"):
        ctx.set_progress(3)
    assert ctx.progress == {"step": 2}


# ------------------------------------------------------------------ the buffer
async def test_the_buffer_keeps_the_latest_value_per_attempt() -> None:
    buf = ProgressBuffer(asyncio.get_running_loop())
    assert not buf.pending and not buf.ready.is_set()
    for i in range(1000):
        buf.put("a", "t1", str(i / 1000))
    buf.put("b", "t2", "0.5")
    assert buf.pending and buf.ready.is_set()
    assert buf.take() == [ProgressUpdate("a", "t1", "0.999"), ProgressUpdate("b", "t2", "0.5")]
    assert not buf.pending and not buf.ready.is_set()
    # an ack batch takes the values of its own activities only
    buf.put("a", "t1", "0.1")
    buf.put("b", "t2", "0.2")
    assert buf.take_for(["b", "c"]) == [ProgressUpdate("b", "t2", "0.2")]
    assert buf.ready.is_set() and list(buf.pending) == ["a"]
    assert buf.take_for(["a"]) == [ProgressUpdate("a", "t1", "0.1")] and not buf.ready.is_set()
    # a failed write is put back, unless a newer value of the attempt came meanwhile
    buf.put("a", "t1", "1.0")
    buf.restore([ProgressUpdate("a", "t1", "0.999"), ProgressUpdate("b", "t2", "0.5")])
    assert sorted(buf.take(), key=lambda u: u.id) == [ProgressUpdate("a", "t1", "1.0"),
                                                       ProgressUpdate("b", "t2", "0.5")]


async def test_a_value_from_another_thread_wakes_the_loop() -> None:
    buf = ProgressBuffer(asyncio.get_running_loop())
    t = threading.Thread(target=buf.put, args=("a", "t", "0.5"))
    t.start()
    await asyncio.wait_for(buf.ready.wait(), 5)
    t.join()
    assert buf.take() == [ProgressUpdate("a", "t", "0.5")]


# ------------------------------------------------------------------ the engine
class CountingBackend(MemoryBackend):
    """Counts the progress writes; fails the first ``fail`` of them."""

    def __init__(self, fail: int = 0) -> None:
        super().__init__()
        self.writes: list[list[ProgressUpdate]] = []
        self.fail = fail

    async def set_progress(self, queue: str, updates: Any) -> list[str]:
        if self.fail:
            self.fail -= 1
            raise rq.BackendError("the store is away")
        self.writes.append(list(updates))
        return await super().set_progress(queue, updates)


async def test_many_activities_reporting_in_tight_loops_make_few_writes() -> None:
    backend = CountingBackend()
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "p", "max_workers": 8})

    @engine.activity("t")
    async def busy(payload: Any, ctx: rq.ActivityContext) -> None:
        for step in range(5):
            for i in range(2000):
                ctx.set_progress({"step": step, "i": i})
            await asyncio.sleep(0.01)
        ctx.set_progress(1.0)

    futs = [await engine.executor.activity("t").execute() for _ in range(8)]
    async with engine:
        for f in futs:
            await f.result(timeout=10)
    # 80,008 calls; each write carries the latest value of every attempt that reported since the last
    assert 1 <= len(backend.writes) <= 12, len(backend.writes)
    assert all(len({u.id for u in w}) == len(w) for w in backend.writes)
    for f in futs:
        assert await f.progress() == 1.0


async def test_acks_of_other_activities_do_not_flush_a_running_ones_progress() -> None:
    # every ack batch writes the progress of its own activities first; a long activity reporting in a
    # tight loop beside a stream of short ones is still written at most every PROGRESS_INTERVAL
    backend = CountingBackend()
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "p", "max_workers": 4})

    @engine.activity("long")
    async def long(payload: Any, ctx: rq.ActivityContext) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + 1.0
        i = 0
        while loop.time() < end:
            i += 1
            ctx.set_progress({"i": i})
            await asyncio.sleep(0)

    @engine.activity("short")
    async def short(payload: Any, ctx: rq.ActivityContext) -> None:
        await asyncio.sleep(0.002)

    long_fut = await engine.executor.activity("long").execute()
    shorts = [await engine.executor.activity("short").execute() for _ in range(300)]
    async with engine:
        for f in shorts:
            await f.result(timeout=10)
        await long_fut.result(timeout=10)
    assert engine.stats["completed"] == 301
    assert 2 <= len(backend.writes) <= 5, len(backend.writes)  # 1 s: at once, then every 0.5 s, and the last
    last = await long_fut.progress()
    assert isinstance(last, dict) and last["i"] > 100


async def test_the_last_value_of_an_attempt_released_at_shutdown_is_written() -> None:
    backend = CountingBackend()
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "p", "shutdown_grace": 0.1})
    started = asyncio.Event()

    @engine.activity("t")
    async def stuck(payload: Any, ctx: rq.ActivityContext) -> None:
        ctx.set_progress(0.1)
        started.set()
        await asyncio.sleep(0.1)  # after the first write: the next waits for the interval (0.5 s)
        ctx.set_progress(0.7)
        await asyncio.sleep(60)

    fut = await engine.executor.activity("t").execute()
    async with engine:
        await started.wait()
        async def second_value() -> bool:
            return bool(engine._outcomes and engine._outcomes.progress.pending)

        await eventually(second_value, 5.0, "the second value to be buffered")
    snap = await backend.get_activity(fut.activity_id)
    assert snap is not None and snap.status == "pending" and snap.progress == "0.7"


async def test_a_failed_write_is_sent_again(caplog: pytest.LogCaptureFixture) -> None:
    backend = CountingBackend(fail=1)
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "p"})
    go_on = asyncio.Event()

    @engine.activity("t")
    async def slow(payload: Any, ctx: rq.ActivityContext) -> None:
        ctx.set_progress(0.4)
        await go_on.wait()

    fut = await engine.executor.activity("t").execute()
    async with engine:
        async def written() -> bool:
            return await fut.progress() == 0.4

        await eventually(written, 5.0, "the value to be written after the failure")
        go_on.set()
        await fut.result(timeout=5)
    assert "progress write of 1 activities failed" in caplog.text


# ------------------------------------------------------------------ readers
def test_inspect_and_the_sync_client_show_progress(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"

    async def seed() -> str:
        b = await open_backend(url)
        try:
            item = new()
            await b.enqueue("default", [item])
            [claimed] = await b.claim("default", "w", 1, None, 60_000)
            await b.set_progress("default", [ProgressUpdate(item.id, claimed.claim_token, '{"rows":120,"of":400}')])
            return item.id
        finally:
            await b.close()

    aid = asyncio.run(seed())
    runner = CliRunner()
    shown = runner.invoke(cli, ["inspect", aid, "--backend", url, "--json"])
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.output)
    assert doc["activity"]["progress"] == {"rows": 120, "of": 400}
    assert [e["detail"] for e in doc["events"] if e["event_type"] == "progress"] == ['{"rows":120,"of":400}']
    table = runner.invoke(cli, ["inspect", aid, "--backend", url])
    assert table.exit_code == 0, table.output
    assert '{"rows":120,"of":400}' in table.output and "progress" in table.output
    with rq.SyncExecutor(url) as client:
        assert client.progress(aid) == {"rows": 120, "of": 400}
        assert client.progress(rq.SyncExecutor.__name__) is None  # unknown


async def test_a_file_not_migrated_to_0013_is_still_read_without_progress(tmp_path: Path) -> None:
    # a read-only look (inspect, serve --read-only) opens without migrating: a store an older release
    # wrote, with no progress column yet, still shows its activities
    path = tmp_path / "old.db"
    b = await open_backend(f"sqlite:///{path}")
    item = new()
    await b.enqueue("q", [item])
    await b.close()
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE runnerq_activities DROP COLUMN progress")
    conn.execute("DELETE FROM runnerq_migrations WHERE version = 13")
    conn.commit()
    conn.close()
    ro = await rq.connect(f"sqlite:///{path}", read_only=True)
    try:
        snap = await ro.get_activity(item.id)
        assert snap is not None and snap.status == "pending" and snap.progress is None
    finally:
        await ro.close()
