"""``runnerq-fast worker MODULE:ENGINE --processes N``: the supervisor, as a real subprocess.

The app is ``tests/acceptance/supervised_app.py``: each run of ``record``
appends its activity id to ``<dir>/<pid>.ran``, so a test sees which process
ran what and that nothing ran twice. Backends: a real SQLite file, a fresh
PostgreSQL database, a fresh Redis queue (its keys deleted afterwards).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest
import redis
from prometheus_client import CollectorRegistry

import runnerq_fast as rq
from runnerq_fast.supervisor.metrics import MultiProcessCollector
from tests.acceptance.helpers import HERE, WorkerProcess, cli_command, run_cli, subprocess_env

APP = "supervised_app:engine"
QUEUE = "supervised"
REDIS_URL = os.environ.get("RUNNERQ_TEST_REDIS", "redis://127.0.0.1:6379/0")
_STARTED = re.compile(r"worker process (\d+) started \(pid (\d+)\)")
_UNFINISHED = ("pending", "scheduled", "processing", "retrying")


# ----------------------------------------------------------------- helpers
def child_pids(w: WorkerProcess) -> list[int]:
    """Pids of every child the supervisor logged as started, in order."""
    return [int(m.group(2)) for m in _STARTED.finditer(w.log())]


def wait_for_engines(w: WorkerProcess, n: int, timeout: float = 20.0) -> None:
    """Block until ``n`` child engines logged that they started."""
    deadline = time.monotonic() + timeout
    while len(re.findall(r"\] runnerq_fast\.engine: engine \S+ started on", w.log())) < n:
        if w.proc.poll() is not None:
            pytest.fail(f"supervisor exited with {w.proc.returncode}:\n{w.log()}")
        if time.monotonic() > deadline:
            pytest.fail(f"{n} engines did not start within {timeout} s:\n{w.log()}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers; it is gone once its parent (the supervisor) reaped it or exited
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids):
        assert time.monotonic() < deadline, f"still running: {[p for p in pids if alive(p)]}"
        time.sleep(0.05)


async def _enqueue(url: str, queue: str, n: int, run_dir: Path, sleep: float = 0.0, batch: int = 10) -> list[str]:
    """Enqueue ``n`` ``record`` activities in batches of ``batch`` (one enqueue call each, as traffic arrives)."""
    backend = await rq.connect(url)
    try:
        ex = rq.ActivityExecutor(backend, queue)
        payload = {"dir": str(run_dir), "sleep": sleep}
        ids: list[str] = []
        while len(ids) < n:
            ids += await ex.enqueue_many([("record", payload)] * min(batch, n - len(ids)))
        return ids
    finally:
        await backend.close()


async def _stats(url: str, queue: str) -> rq.QueueStats:
    backend = await rq.connect(url)
    try:
        return await backend.stats(queue)
    finally:
        await backend.close()


async def _result_pids(url: str, ids: list[str]) -> dict[str, int]:
    backend = await rq.connect(url)
    try:
        pids: dict[str, int] = {}
        for activity_id in ids:
            res = await backend.get_result(activity_id)
            assert res is not None and res.status == "completed" and res.data is not None, res
            pids[activity_id] = int(msgspec.json.decode(res.data)["pid"])
        return pids
    finally:
        await backend.close()


def ran(run_dir: Path) -> dict[int, list[str]]:
    """Activity ids each process ran, by pid (from the ``.ran`` files)."""
    return {int(f.stem): f.read_text().split() for f in run_dir.glob("*.ran")}


def wait_drained(url: str, queue: str, n: int, timeout: float) -> rq.QueueStats:
    deadline = time.monotonic() + timeout
    while True:
        stats = asyncio.run(_stats(url, queue))
        if stats.completed == n and not any(getattr(stats, s) for s in _UNFINISHED):
            return stats
        assert time.monotonic() < deadline, f"not drained after {timeout} s: {stats}"
        time.sleep(0.1)


def assert_each_ran_once(url: str, ids: list[str], run_dir: Path) -> dict[int, list[str]]:
    """Every id ran exactly once, and its stored result names the process that ran it."""
    by_pid = ran(run_dir)
    every = [i for done in by_pid.values() for i in done]
    assert sorted(every) == sorted(ids), (len(every), len(ids))
    result_pids = asyncio.run(_result_pids(url, ids))
    assert all(activity_id in by_pid[pid] for activity_id, pid in result_pids.items())
    return by_pid


@pytest.fixture
def start(start_worker: Callable[..., WorkerProcess]) -> Callable[..., WorkerProcess]:
    """Start ``runnerq-fast worker supervised_app:engine ARGS`` from this directory."""

    def go(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        return start_worker(APP, *args, cwd=HERE, env=env)

    return go


@pytest.fixture
def redis_queue() -> Iterator[str]:
    """A fresh queue name on the test Redis server (default namespace); its keys are deleted afterwards."""
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        client.close()
        message = f"Redis at {REDIS_URL} is not usable: {exc!r}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    queue = f"sup-{uuid.uuid4().hex[:12]}"
    try:
        yield queue
    finally:
        for key in client.scan_iter(match=f"rq:{{{queue}}}:*", count=1000):
            client.unlink(key)
        client.srem("rq:queues", queue)
        client.close()


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'queue.db'}"


# ------------------------------------------------------------------- input
def test_bad_processes_exit_2_before_anything_starts() -> None:
    for value, message in (("0", "'0' is not at least 1"), ("x", "'x' is not a whole number or 'auto'"),
                           ("-3", "is not at least 1")):
        res = run_cli("worker", APP, "--backend", "memory://", "--processes", value, cwd=HERE)
        assert res.returncode == 2, (value, res.stderr)
        assert message in res.stderr, res.stderr
        assert "Traceback" not in res.stderr
    backoff = run_cli("worker", APP, "--backend", "sqlite:///unused.db", "--processes", "2", "--restart-backoff", "5",
                      "--restart-backoff-max", "1", cwd=HERE)
    assert backoff.returncode == 2 and "--restart-backoff-max (1) is below --restart-backoff (5)" in backoff.stderr
    memory = run_cli("worker", APP, "--backend", "memory://", "--processes", "2", cwd=HERE)
    assert memory.returncode == 2 and "memory:// lives inside one process" in memory.stderr
    assert "started (pid" not in memory.stderr
    bad_target = run_cli("worker", "no_such_module:engine", "--backend", "memory://", "--processes", "2")
    assert bad_target.returncode == 2
    assert "cannot import module 'no_such_module'" in bad_target.stderr
    assert "started (pid" not in bad_target.stderr  # refused in the supervisor, no child started


def test_a_child_refusing_its_configuration_stops_the_supervisor_with_exit_2(tmp_path: Path) -> None:
    # no backend anywhere: every child refuses at start (exit 2), which is not a crash to retry
    res = run_cli("worker", APP, "--processes", "2", cwd=HERE, timeout=40)
    assert res.returncode == 2, res.stderr
    assert "--backend" in res.stderr and "RUNNERQ_BACKEND" in res.stderr
    assert "exited with code 2 (bad input) before its engine started; not restarting" in res.stderr
    assert "restarting in" not in res.stderr


def test_processes_auto_is_one_per_core(start: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    cores = os.cpu_count() or 1
    w = start("--backend", sqlite_url(tmp_path), "--processes", "auto")
    wait_for_engines(w, cores)
    assert f"starting {cores} worker processes (spawn)" in w.log()
    assert len(child_pids(w)) == cores
    w.signal(signal.SIGTERM)
    assert w.wait(20) == 0, w.log()


# ------------------------------------------------------------------ drains
def _drain_with_two(start: Callable[..., WorkerProcess], url: str, queue: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "ran"
    run_dir.mkdir()
    w = start("--backend", url, "--queue", queue, "--processes", "2", "--concurrency", "4")
    wait_for_engines(w, 2)
    ids = asyncio.run(_enqueue(url, queue, 300, run_dir, sleep=0.02))
    wait_drained(url, queue, 300, timeout=40)
    by_pid = assert_each_ran_once(url, ids, run_dir)
    assert set(by_pid) == set(child_pids(w)), (by_pid.keys(), child_pids(w))  # both children did work
    assert all(len(done) > 0 for done in by_pid.values())
    w.signal(signal.SIGTERM)
    assert w.wait(20) == 0, w.log()
    wait_gone(child_pids(w))
    assert "Traceback" not in w.log()


def test_two_processes_drain_a_sqlite_file_each_activity_once(
    start: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    _drain_with_two(start, sqlite_url(tmp_path), QUEUE, tmp_path)


@pytest.mark.postgres
def test_two_processes_drain_postgresql_each_activity_once(
    start: Callable[..., WorkerProcess], fresh_pg_url: str, tmp_path: Path
) -> None:
    _drain_with_two(start, fresh_pg_url, QUEUE, tmp_path)


def test_two_processes_drain_redis_each_activity_once(
    start: Callable[..., WorkerProcess], redis_queue: str, tmp_path: Path
) -> None:
    _drain_with_two(start, REDIS_URL, redis_queue, tmp_path)


# ----------------------------------------------------------------- signals
def test_sigterm_stops_every_child_gracefully_and_nothing_stays_processing(
    start: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    url = sqlite_url(tmp_path)
    run_dir = tmp_path / "ran"
    run_dir.mkdir()
    w = start("--backend", url, "--processes", "2", "--concurrency", "2", "--shutdown-grace", "10")
    wait_for_engines(w, 2)
    asyncio.run(_enqueue(url, QUEUE, 8, run_dir, sleep=0.6))
    deadline = time.monotonic() + 10
    while len(ran(run_dir)) < 2:  # both children are running activities
        assert time.monotonic() < deadline, w.log()
        time.sleep(0.05)
    pids = child_pids(w)
    w.signal(signal.SIGTERM)
    assert w.wait(20) == 0, w.log()
    wait_gone(pids)
    log = w.log()
    # forwarded once: one SIGTERM per child
    assert all(log.count(f"worker process {pid} received SIGTERM") == 1 for pid in pids), log
    assert log.count("stopped (exit code 0)") == 2
    stats = asyncio.run(_stats(url, QUEUE))
    assert stats.processing == 0 and stats.completed >= 4 and stats.pending + stats.completed == 8, stats


def test_ctrl_c_to_the_whole_process_group_is_one_graceful_stop(tmp_path: Path) -> None:
    # a terminal's Ctrl-C sends SIGINT to every process of the group: children ignore it and get one SIGTERM
    log_path = tmp_path / "group.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen([*cli_command(), "worker", APP, "--backend", sqlite_url(tmp_path), "--processes", "2"],
                                cwd=HERE, env=subprocess_env(), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 20
            while log_path.read_text().count("] runnerq_fast.engine: engine ") < 2:
                assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGINT)
            assert proc.wait(20) == 0, log_path.read_text()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
    log = log_path.read_text()
    pids = [int(m.group(2)) for m in _STARTED.finditer(log)]
    assert len(pids) == 2
    assert all(log.count(f"worker process {pid} received SIGTERM") == 1 for pid in pids), log
    assert log.count("stopped (exit code 0)") == 2 and "KeyboardInterrupt" not in log


def test_a_second_signal_kills_every_child_at_once(start: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    run_dir = tmp_path / "ran"
    run_dir.mkdir()
    w = start("--backend", url, "--processes", "2", "--concurrency", "2", "--shutdown-grace", "60")
    wait_for_engines(w, 2)
    asyncio.run(_enqueue(url, QUEUE, 4, run_dir, sleep=60))
    deadline = time.monotonic() + 10
    while len(ran(run_dir)) < 2:
        assert time.monotonic() < deadline, w.log()
        time.sleep(0.05)
    pids = child_pids(w)
    w.signal(signal.SIGTERM)
    w.wait_for_log("stopping 2 worker processes gracefully")
    time.sleep(0.3)
    assert all(alive(p) for p in pids)  # still in their 60 s grace
    began = time.monotonic()
    w.signal(signal.SIGINT)
    assert w.wait(10) == 1, w.log()
    assert time.monotonic() - began < 5
    wait_gone(pids, timeout=2)
    assert "stopped at once by a second SIGINT: 2 worker processes killed" in w.log()


# ------------------------------------------------------------- restarts
def test_a_killed_child_is_restarted_and_the_queue_still_drains(
    start: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    url = sqlite_url(tmp_path)
    run_dir = tmp_path / "ran"
    run_dir.mkdir()
    w = start("--backend", url, "--processes", "2", "--concurrency", "4", "--lease-timeout", "1")
    wait_for_engines(w, 2)
    first = child_pids(w)
    ids = asyncio.run(_enqueue(url, QUEUE, 200, run_dir, sleep=0.02))
    deadline = time.monotonic() + 10
    while first[0] not in ran(run_dir):
        assert time.monotonic() < deadline, w.log()
        time.sleep(0.02)
    os.kill(first[0], signal.SIGKILL)
    w.wait_for_log(f"worker process 0 (pid {first[0]}) crashed (killed by SIGKILL); restarting in 0.5 s")
    wait_for_engines(w, 3)
    replacement = child_pids(w)[2]
    assert replacement not in first
    # what the killed child held comes back after its 1 s lease (the reaper runs every 5 s)
    stats = wait_drained(url, QUEUE, 200, timeout=40)
    assert stats.completed == 200
    done = [i for ids_ in ran(run_dir).values() for i in ids_]
    assert set(done) == set(ids)  # every activity ran; those the killed child held ran again
    w.signal(signal.SIGTERM)
    assert w.wait(20) == 0, w.log()


def test_a_child_stopped_by_someone_else_is_replaced(start: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    w = start("--backend", sqlite_url(tmp_path), "--processes", "2")
    wait_for_engines(w, 2)
    first = child_pids(w)
    os.kill(first[1], signal.SIGTERM)  # e.g. an operator's kill: a graceful stop, exit 0, not a crash
    w.wait_for_log(f"worker process 1 (pid {first[1]}) stopped without being asked to; starting a new one in 0.5 s")
    wait_for_engines(w, 3)
    assert len(child_pids(w)) == 3 and child_pids(w)[2] not in first
    assert "crashed" not in w.log()
    w.signal(signal.SIGTERM)
    assert w.wait(20) == 0, w.log()


def test_a_crash_loop_gives_up_with_exit_1(start: Callable[..., WorkerProcess]) -> None:
    # the database refuses every connection: each child fails at start
    began = time.monotonic()
    res = run_cli("worker", APP, "--backend", "postgresql://postgres@127.0.0.1:1/nothing", "--processes", "2",
                  "--restart-limit", "3", "--restart-backoff", "0.1", cwd=HERE, timeout=60)
    assert res.returncode == 1, res.stderr
    assert time.monotonic() - began < 40
    assert re.search(r"error: worker process \d \(pid \d+\) crashed 3 times within 60 s \(last: exit code 1\); "
                     r"giving up", res.stderr), res.stderr
    assert "restarting in 0.1 s" in res.stderr and "restarting in 0.2 s" in res.stderr


# ------------------------------------------------------------ recycling
def test_max_activities_per_child_recycles_with_new_pids_and_loses_nothing(
    start: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    url = sqlite_url(tmp_path)
    run_dir = tmp_path / "ran"
    run_dir.mkdir()
    w = start("--backend", url, "--processes", "2", "--concurrency", "4", "--max-activities-per-child", "40")
    wait_for_engines(w, 2)
    ids = asyncio.run(_enqueue(url, QUEUE, 400, run_dir, sleep=0.08))  # >= 4 s: time for replacements to start
    wait_drained(url, QUEUE, 400, timeout=60)
    by_pid = assert_each_ran_once(url, ids, run_dir)
    assert len(by_pid) >= 3, by_pid.keys()  # replacements (new pids) did part of the work
    log = w.log()
    assert "its replacement starts first" in log and "recycled after" in log
    w.signal(signal.SIGTERM)
    assert w.wait(20) == 0, w.log()
    wait_gone(child_pids(w))


def test_max_memory_per_child_recycles_gracefully(start: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    w = start("--backend", sqlite_url(tmp_path), "--processes", "1", "--max-memory-per-child", "1")
    w.wait_for_log("MiB resident; its replacement starts first", timeout=20)
    w.wait_for_log("recycled after reaching", timeout=20)
    assert re.search(r"recycled after reaching \d+ MiB resident \(exit code 0\)", w.log()), w.log()
    w.signal(signal.SIGTERM)
    assert w.wait(20) == 0, w.log()


# --------------------------------------------------------------- metrics
def test_metrics_of_every_child_are_aggregated_and_dead_children_folded(
    start: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    url = sqlite_url(tmp_path)
    run_dir = tmp_path / "ran"
    run_dir.mkdir()
    prom = tmp_path / "prom"
    prom.mkdir()
    (prom / "counter_999999.db").write_bytes(b"left by an earlier run")
    w = start("--backend", url, "--processes", "2", "--concurrency", "4", "--max-activities-per-child", "40",
              "--metrics-port", "0", env={"PROMETHEUS_MULTIPROC_DIR": str(prom)})
    wait_for_engines(w, 2)
    assert not (prom / "counter_999999.db").exists()  # wiped at start
    found = re.search(r"metrics of all worker processes at http://127\.0\.0\.1:(\d+)/metrics", w.log())
    assert found, w.log()
    port = int(found[1])
    asyncio.run(_enqueue(url, QUEUE, 250, run_dir, sleep=0.1))  # >= 3 s: time for replacements to start
    wait_drained(url, QUEUE, 250, timeout=60)
    assert len(ran(run_dir)) >= 3  # children were recycled: their counts must survive them
    deadline = time.monotonic() + 5
    while True:  # a child's last increments are written before its ack, so the total is 250 by now
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        if "supervised_app_records_total 250.0" in body:
            break
        assert time.monotonic() < deadline, body
        time.sleep(0.1)
    w.signal(signal.SIGTERM)
    assert w.wait(20) == 0, w.log()
    files = sorted(p.name for p in prom.glob("*.db"))
    assert files == ["counter_archive.db"], files  # every exited child folded into one file per type
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(prom))
    assert registry.get_sample_value("supervised_app_records_total") == 250
