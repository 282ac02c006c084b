"""The supervisor's parts that run in one process: restart policy, child link and serve_child, metrics folding."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.mmap_dict import mmap_key

import runnerq_fast as rq
from runnerq_fast.supervisor import ChildLink, RestartPolicy, Supervisor, SupervisorConfig, rss_bytes, serve_child
from runnerq_fast.supervisor.metrics import ENV, MetricsDirectory, MmapedDict, MultiProcessCollector
from runnerq_fast.supervisor.pool import describe_exit


# ------------------------------------------------------------------ policy
def test_backoff_doubles_per_crash_up_to_the_cap_and_the_limit_is_a_crash_loop() -> None:
    p = RestartPolicy(backoff=0.5, backoff_max=3.0, limit=5, window=60)
    assert [p.crashed(0, t) for t in (0.0, 1.0, 2.0, 3.0)] == [0.5, 1.0, 2.0, 3.0]
    assert p.crashed(0, 4.0) is None  # the 5th crash within 60 s
    assert p.crashed(1, 4.0) == 0.5  # slots are independent
    assert p.recent(0, 4.0) == 5 and p.recent(1, 4.0) == 1


def test_crashes_older_than_the_window_are_forgotten() -> None:
    p = RestartPolicy(backoff=1.0, backoff_max=30.0, limit=3, window=10)
    assert p.crashed(0, 0.0) == 1.0
    assert p.crashed(0, 5.0) == 2.0
    assert p.crashed(0, 10.5) == 2.0  # the crash at 0 s left the window: not a crash loop, and back to 2 s
    assert p.crashed(0, 40.0) == 1.0  # ran a whole window without crashing: backoff starts over
    assert p.recent(0, 40.0) == 1


def test_limit_1_gives_up_at_the_first_crash() -> None:
    assert RestartPolicy(limit=1).crashed(0, 0.0) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backoff": -1}, "0 <= backoff <= backoff_max"),
        ({"backoff": 5, "backoff_max": 1}, "0 <= backoff <= backoff_max"),
        ({"limit": 0}, "at least 1"),
        ({"window": 0}, "must be positive"),
    ],
)
def test_bad_policy_settings_are_config_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(rq.ConfigError, match=message):
        RestartPolicy(**kwargs)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (SupervisorConfig(processes=0), "processes must be at least 1"),
        (SupervisorConfig(start_method="fork"), "start method must be one of spawn, forkserver"),
        (SupervisorConfig(max_activities=0), "max activities per child"),
        (SupervisorConfig(max_memory=0), "max memory per child"),
        (SupervisorConfig(restart_limit=0), "restart limit"),
    ],
)
def test_bad_supervisor_settings_are_config_errors(config: SupervisorConfig, message: str) -> None:
    with pytest.raises(rq.ConfigError, match=message):
        Supervisor(_never_called, None, config)


def _never_called(args: None, link: ChildLink) -> None:
    raise AssertionError("no child may start")


def test_exit_codes_are_described() -> None:
    assert describe_exit(1) == "exit code 1"
    assert describe_exit(-9) == "killed by SIGKILL"


def test_rss_of_a_live_and_a_missing_process() -> None:
    rss = rss_bytes(os.getpid())
    assert rss is not None and rss > 10 * 2**20  # a Python interpreter with the package imported
    assert rss_bytes(2**22 + 12345) is None  # above the default pid_max


# ------------------------------------------------------------------ child
async def test_serve_child_marks_ready_reports_finished_activities_and_stops() -> None:
    engine = rq.WorkerEngine("memory://", queue_name="child", max_workers=4)
    seen: list[int] = []

    @engine.activity("t")
    async def t(payload: Any, ctx: rq.ActivityContext) -> None:
        seen.append(payload)

    link = ChildLink(multiprocessing.get_context("spawn"))
    assert link.supervisor_pid == os.getpid() and not link.ready and link.activities == 0
    link.supervisor_pid = os.getppid()  # in a real child the creator is the parent
    task = asyncio.create_task(serve_child(engine, link, report_interval=0.01))
    for _ in range(500):
        if link.ready:
            break
        await asyncio.sleep(0.01)
    assert link.ready
    await engine.executor.enqueue_many([("t", i) for i in range(7)])
    for _ in range(500):
        if link.activities == 7:
            break
        await asyncio.sleep(0.01)
    assert link.activities == 7 and sorted(seen) == list(range(7))
    engine.request_stop()
    await asyncio.wait_for(task, 10)
    assert engine.in_flight == 0


async def test_serve_child_reports_a_failing_start() -> None:
    engine = rq.WorkerEngine("memory://", queue_name="child", activity_types=["missing"])

    @engine.activity("t")
    async def t(payload: Any, ctx: rq.ActivityContext) -> None:
        return None

    link = ChildLink(multiprocessing.get_context("spawn"))
    with pytest.raises(rq.ConfigError, match="missing"):
        await serve_child(engine, link)
    assert not link.ready


# ---------------------------------------------------------------- metrics
def _write(path: Path, samples: dict[tuple[str, str, tuple[tuple[str, str], ...]], float]) -> None:
    d = MmapedDict(str(path))
    for (metric, sample, labels), value in samples.items():
        d.write_value(mmap_key(metric, sample, [k for k, _ in labels], [v for _, v in labels], "help"), value, 0.0)
    d.close()


def _collect(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(path))
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for m in registry.collect() for s in m.samples}


def _child_files(prom: Path, pid: int, count: float) -> None:
    _write(prom / f"counter_{pid}.db", {("jobs", "jobs_total", (("queue", "q"),)): count})
    _write(prom / f"histogram_{pid}.db", {
        ("run", "run_bucket", (("le", "0.1"),)): count, ("run", "run_bucket", (("le", "+Inf"),)): 1.0,
        ("run", "run_sum", ()): count / 10,
    })
    _write(prom / f"gauge_livesum_{pid}.db", {("busy", "busy", ()): 2.0})
    _write(prom / f"gauge_max_{pid}.db", {("peak", "peak", ()): count})
    _write(prom / f"gauge_all_{pid}.db", {("rss", "rss", ()): 100.0 + pid})


def test_a_dead_childs_metrics_fold_into_one_archive_and_the_totals_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prom = tmp_path / "prom"
    prom.mkdir()
    (prom / "counter_7.db").write_bytes(b"stale")
    monkeypatch.setenv(ENV, str(prom))
    metrics = MetricsDirectory()
    try:
        assert not metrics.owned and metrics.file_count() == 0  # a previous run's files are wiped
        for pid, count in ((101, 3.0), (102, 4.0), (103, 5.0)):
            _child_files(prom, pid, count)
        before = _collect(prom)
        assert before[("jobs_total", (("queue", "q"),))] == 12.0
        metrics.process_dead(101)
        metrics.process_dead(102)
        after = _collect(prom)
        assert after[("jobs_total", (("queue", "q"),))] == 12.0
        assert after[("run_bucket", (("le", "0.1"),))] == before[("run_bucket", (("le", "0.1"),))] == 12.0
        assert after[("run_bucket", (("le", "+Inf"),))] == 15.0  # cumulative: 12 in le=0.1 plus 3 above
        assert after[("run_count", ())] == 15.0 and after[("run_sum", ())] == pytest.approx(1.2)
        assert after[("peak", ())] == 5.0
        assert after[("busy", ())] == 2.0  # only the live child's live gauge remains (it was 6 with three)
        assert before[("busy", ())] == 6.0
        assert after[("rss", (("pid", "101"),))] == 201.0  # mode "all": one series per process, kept
        names = sorted(p.name for p in prom.glob("*.db"))
        assert names == sorted([
            "counter_archive.db", "histogram_archive.db", "gauge_max_archive.db", "gauge_all_101.db",
            "gauge_all_102.db", "counter_103.db", "histogram_103.db", "gauge_livesum_103.db", "gauge_max_103.db",
            "gauge_all_103.db",
        ])
    finally:
        metrics.close()
    assert prom.is_dir()  # a directory the user named is kept


def test_an_own_directory_is_served_and_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    metrics = MetricsDirectory()
    path = Path(metrics.path)
    try:
        assert metrics.owned and path.is_dir() and os.environ[ENV] == metrics.path
        _child_files(path, 201, 9.0)
        port = metrics.serve(0)
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert 'jobs_total{queue="q"} 9.0' in body
    finally:
        metrics.close()
    assert not path.exists() and ENV not in os.environ


# ------------------------------------------------- the stop of an orphaned child
async def test_request_stop_with_a_grace_cuts_the_shutdown_grace_and_releases_what_runs() -> None:
    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, queue_name="orphan", shutdown_grace=30.0)
    started = asyncio.Event()

    @engine.activity("long")
    async def long(payload: Any, ctx: rq.ActivityContext) -> None:
        started.set()
        await asyncio.sleep(30)

    fut = await engine.executor.activity("long").execute()
    task = asyncio.create_task(engine.run_until_stopped(handle_signals=False))
    await asyncio.wait_for(started.wait(), 5)
    engine.request_stop(grace=0.05)  # what a child does when its supervisor died
    await asyncio.wait_for(task, 5)  # not the 30 s shutdown grace
    snap = await backend.get_activity(fut.activity_id)
    assert snap is not None and (snap.status, snap.retry_count) == ("pending", 0)


async def test_a_claim_landing_after_request_stop_is_released_and_none_of_it_runs() -> None:
    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, queue_name="orphan", max_workers=4)
    ran: list[Any] = []

    @engine.activity("t")
    async def t(payload: Any, ctx: rq.ActivityContext) -> None:
        ran.append(payload)

    ids = await engine.executor.enqueue_many([("t", i) for i in range(3)])
    claim = backend.claim

    async def claim_during_which_the_stop_is_asked(*args: Any, **kwargs: Any) -> Any:
        got = await claim(*args, **kwargs)
        engine.request_stop()  # e.g. the supervisor died while this claim was on its way
        return got

    backend.claim = claim_during_which_the_stop_is_asked  # type: ignore[method-assign]
    await asyncio.wait_for(engine.run_until_stopped(handle_signals=False), 5)
    assert ran == []
    snaps = [await backend.get_activity(i) for i in ids]
    assert [(s.status, s.retry_count) for s in snaps if s is not None] == [("pending", 0)] * 3


def test_request_stop_refuses_a_negative_grace() -> None:
    engine = rq.WorkerEngine("memory://", queue_name="orphan")
    for bad in (-1.0, float("nan")):
        with pytest.raises(rq.ConfigError, match="grace must be >= 0 seconds"):
            engine.request_stop(grace=bad)
