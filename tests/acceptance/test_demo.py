"""``runnerq-fast demo`` as a subprocess: default SQLite file, re-runs, bad URLs, PostgreSQL, memory."""

from __future__ import annotations

import os
import re
import shlex
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
import redis

from runnerq_fast import demo
from tests.acceptance.helpers import WorkerProcess, cli_command, run_cli, subprocess_env
from tests.redis_fixtures import REDIS_URL

SMALL = "300"  # activities per test run: every part of the workload, quickly


def _commands(stdout: str) -> list[list[str]]:
    """The ``runnerq-fast ...`` lines the demo printed, as argument lists."""
    lines = [line for line in stdout.splitlines() if line.startswith("  ") and "runnerq-fast " in line]
    return [line.split("#")[0].split()[1:] for line in lines]


def test_demo_defaults_to_a_sqlite_file_in_the_working_directory(tmp_path: Path) -> None:
    done = run_cli("demo", "-n", SMALL, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "runnerq-demo.db").is_file()
    assert re.search(r"completed\s+│\s+299", done.stdout)
    assert re.search(r"dead_letter\s+│\s+1", done.stdout)
    for figure in ("throughput", "enqueue→start p50 / p99", "end-to-end p50 / p99", "retries", "dead letters"):
        assert figure in done.stdout
    assert str(tmp_path / "runnerq-demo.db") in done.stdout

    commands = _commands(done.stdout)
    assert [c[0] for c in commands] == ["stats", "inspect", "inspect", "inspect"]
    # the printed commands work from any directory and show what the run stored
    stats = run_cli(*commands[0], "--json", cwd=tmp_path.parent)
    assert stats.returncode == 0, stats.stderr
    counts = msgspec.json.decode(stats.stdout)
    assert (counts["completed"], counts["dead_letter"], counts["total"]) == (299, 1, 300)
    dead = run_cli(*commands[1], "--json", cwd=tmp_path.parent)
    assert dead.returncode == 0, dead.stderr
    doc = msgspec.json.decode(dead.stdout)
    assert doc["activity"]["status"] == "dead_letter" and doc["activity"]["retry_count"] == demo.POISON_RETRIES
    assert [e["event_type"] for e in doc["events"]].count("retrying") == demo.POISON_RETRIES
    retried = msgspec.json.decode(run_cli(*commands[2], "--json", cwd=tmp_path.parent).stdout)
    assert retried["activity"]["status"] == "completed" and retried["activity"]["retry_count"] == 1
    chain_end = msgspec.json.decode(run_cli(*commands[3], "--json", cwd=tmp_path.parent).stdout)
    assert chain_end["result"]["data"] == {"step": demo.CHAIN_STEPS - 1, "next": None}


def test_a_second_run_reuses_the_file_with_a_fresh_queue(tmp_path: Path) -> None:
    first = run_cli("demo", "-n", SMALL, timeout=120, cwd=tmp_path)
    second = run_cli("demo", "-n", SMALL, timeout=120, cwd=tmp_path)
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    queues = [re.search(r"queue (demo-\S+)", r.stdout) for r in (first, second)]
    assert "(new file)" in first.stdout and "existing file reused" in second.stdout
    assert all(queues)
    assert queues[0] and queues[1] and queues[0][1] != queues[1][1]
    conn = sqlite3.connect(tmp_path / "runnerq-demo.db")
    try:
        rows = dict(conn.execute("SELECT queue_name, count(*) FROM runnerq_activities GROUP BY queue_name"))
    finally:
        conn.close()
    assert rows == {queues[0][1]: 300, queues[1][1]: 300}


def test_printed_commands_run_when_runnerq_fast_is_not_on_path(tmp_path: Path) -> None:
    # README: `.venv/bin/pip install . && .venv/bin/runnerq-fast demo` -- the venv is not activated,
    # so a bare `runnerq-fast stats ...` would be "command not found"
    script = cli_command()[0]
    if not script.endswith("runnerq-fast"):
        pytest.skip("the CLI is not installed as a script")
    path = "/usr/bin:/bin"
    done = run_cli("demo", "-n", SMALL, timeout=120, cwd=tmp_path, PATH=path)
    assert done.returncode == 0, done.stderr
    lines = [ln.split("#")[0] for ln in done.stdout.splitlines() if "runnerq-fast stats" in ln]
    assert len(lines) == 1
    argv = shlex.split(lines[0])
    assert argv[0] == str(Path(script).resolve()) or argv[0] == script
    stats = subprocess.run([*argv, "--json"], cwd=tmp_path.parent, env=subprocess_env(PATH=path),
                           capture_output=True, text=True, timeout=30)
    assert stats.returncode == 0, stats.stderr
    assert msgspec.json.decode(stats.stdout)["total"] == 300


def test_demo_refuses_a_missing_directory_and_creates_nothing(tmp_path: Path) -> None:
    done = run_cli("demo", "--backend", f"sqlite:///{tmp_path}/nonexistent/dir/x.db", "-n", SMALL, cwd=tmp_path)
    assert done.returncode == 2
    assert "does not exist" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_demo_leaves_a_file_that_is_not_a_database_untouched(tmp_path: Path) -> None:
    target = tmp_path / "thesis.db"
    target.write_text("chapter one\n" * 100)
    done = run_cli("demo", "--backend", f"sqlite:///{target}", "-n", SMALL, cwd=tmp_path)
    assert done.returncode == 2
    assert "not a SQLite database" in done.stderr and "Traceback" not in done.stderr
    assert target.read_text() == "chapter one\n" * 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thesis.db"]


def test_demo_refuses_a_huge_n_at_once_and_creates_nothing(tmp_path: Path) -> None:
    # -n 1000000000 used to plan every activity in memory before the first enqueue (gigabytes, minutes)
    done = run_cli("demo", "-n", "1000000000", timeout=15, cwd=tmp_path)
    assert done.returncode == 2
    assert f"{demo.MAX_N}" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_stats_and_inspect_never_create_a_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/absent.db"
    stats = run_cli("stats", "--backend", url, cwd=tmp_path)
    inspect = run_cli("inspect", "0" * 32, "--backend", url, cwd=tmp_path)
    assert stats.returncode == 2 and inspect.returncode == 2
    assert "no SQLite database" in stats.stderr and "nothing was created" in inspect.stderr
    assert list(tmp_path.iterdir()) == []


def test_demo_runs_on_the_memory_backend(tmp_path: Path) -> None:
    done = run_cli("demo", "--backend", "memory://", "-n", SMALL, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.search(r"completed\s+│\s+299", done.stdout)
    assert list(tmp_path.iterdir()) == []
    # the memory store ends with the process: no stats/inspect command could show it afterwards
    assert _commands(done.stdout) == []
    assert "earlier runs stay" not in done.stdout
    assert "gone when this process ends" in done.stdout


def test_demo_runs_on_postgresql(fresh_pg_url: str, tmp_path: Path) -> None:
    done = run_cli("demo", "--backend", fresh_pg_url, "-n", SMALL, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.search(r"completed\s+│\s+299", done.stdout)
    commands = _commands(done.stdout)
    dead = run_cli(*commands[1], "--json", cwd=tmp_path)
    assert dead.returncode == 0, dead.stderr
    assert msgspec.json.decode(dead.stdout)["activity"]["status"] == "dead_letter"
    assert list(tmp_path.iterdir()) == []


def test_demo_and_its_printed_commands_run_on_redis(tmp_path: Path) -> None:
    # `stats`/`inspect` on redis:// used to hang at close() (a swallowed cancel in the
    # result subscriber); each printed command must now finish well within its timeout.
    url = REDIS_URL.rsplit("/", 1)[0] + "/15"  # a db index of its own; the run's keys are removed below
    try:
        redis.Redis.from_url(url).ping()
    except redis.RedisError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"Redis at {url} is not usable: {exc!r}")
        pytest.skip(f"Redis at {url} is not usable: {exc!r}")
    done = run_cli("demo", "--backend", url, "-n", SMALL, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    queue = re.search(r"queue (demo-\S+)", done.stdout)
    assert queue is not None
    try:
        assert re.search(r"completed\s+│\s+299", done.stdout)
        commands = _commands(done.stdout)
        stats = run_cli(*commands[0], "--json", cwd=tmp_path, timeout=15)
        assert stats.returncode == 0, stats.stderr
        assert msgspec.json.decode(stats.stdout)["total"] == 300
        dead = run_cli(*commands[1], "--json", cwd=tmp_path, timeout=15)
        assert dead.returncode == 0, dead.stderr
        assert msgspec.json.decode(dead.stdout)["activity"]["status"] == "dead_letter"
    finally:
        client = redis.Redis.from_url(url)
        for key in client.scan_iter(match=f"rq:{{{queue.group(1)}}}:*", count=1000):
            client.unlink(key)


def test_demo_never_prints_the_database_password(fresh_pg_url: str, tmp_path: Path) -> None:
    url = fresh_pg_url.replace("://postgres@", "://postgres:s3cret@", 1)  # trust auth ignores it
    assert "s3cret" in url
    done = run_cli("demo", "--backend", url, "-n", SMALL, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "s3cret" not in done.stdout + done.stderr
    assert "password" in done.stdout


# ------------------------------------------------------------ the workload
def test_workload_mixes_types_sizes_priorities_delays_and_failures() -> None:
    w = demo.plan_workload(10_000, seed=7)
    assert w.total == 10_000
    assert len(w.items) == 10_000 - demo.CHAINS * (demo.CHAIN_STEPS - 1)
    types = {name for name, *_ in w.items}
    assert types == {"chain_step", "ingest_feed", "send_email", "charge_payment", "fraud_check", "resize_image",
                     "sync_inventory", "generate_report"}
    assert [name for name, *_ in w.items].count("ingest_feed") == 1
    assert len({prio for _, _, prio, _, _ in w.items}) == 4
    sizes = [len(msgspec.json.encode(p)) for _, p, *_ in w.items]
    assert min(sizes) < 300 and max(sizes) > 30_000
    flaky = sum(1 for _, p, *_ in w.items if p.get("flaky"))
    delayed = [d for _, _, _, d, _ in w.items if d]
    assert 300 < flaky < 700 and 50 < len(delayed) < 150 and all(0.5 <= d <= 2.0 for d in delayed)


def test_workload_is_reproducible_and_refuses_tiny_runs() -> None:
    assert demo.plan_workload(500, seed=1) == demo.plan_workload(500, seed=1)
    with pytest.raises(ValueError, match="at least"):
        demo.plan_workload(demo.MIN_N - 1)
    with pytest.raises(ValueError, match="at most"):
        demo.plan_workload(demo.MAX_N + 1)


def _stored(path: Path) -> int:
    """Activities in the demo's SQLite file (0 before its schema exists)."""
    if not path.exists():
        return 0
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        return int(conn.execute("SELECT count(*) FROM runnerq_activities").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def test_ctrl_c_stops_the_demo_at_once_and_says_how_to_finish_or_drop_its_queue(
    tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    """Ctrl-C left a half-run queue with no hint, and once took 21 s to exit: a SIGINT could be lost (the run
    went on to its end) or wait out the planning of the workload (issue 27 item 7c)."""
    db = tmp_path / "runnerq-demo.db"
    proc = subprocess.Popen([*cli_command(), "demo", "-n", "100000", "--no-progress"], cwd=tmp_path,
                            env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while _stored(db) < 2_000:  # mid-run: enqueueing and draining
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (stdout, stderr)
    assert took < 5, f"{took:.1f} s from SIGINT to exit"  # about 1 s; the machine is shared
    assert "Traceback" not in stderr and "interrupted after" in stderr, stderr
    queue = re.search(r"queue '(demo-[^']+)' in \S+ keeps ([\d,]+) unfinished", stderr)
    assert queue is not None, stderr
    finish = next(line for line in stderr.splitlines() if "finish them:" in line).split("finish them:")[1].split()
    drop = next(line for line in stderr.splitlines() if "or drop them:" in line)
    assert finish[1:3] == ["worker", "runnerq_fast.demo:engine"] and f"--queue {queue[1]}" in " ".join(finish)
    assert f"cancel --all --queue {queue[1]}" in drop and f"delete --all --queue {queue[1]}" in drop
    # the printed command finishes the run: the demo's handlers serve the queue
    worker = start_worker(*finish[2:], cwd=tmp_path)
    deadline = time.monotonic() + 60
    while True:
        counts = msgspec.json.decode(run_cli("stats", "--json", "--queue", queue[1], "--backend", f"sqlite:///{db}",
                                             cwd=tmp_path).stdout)
        if counts["pending"] + counts["scheduled"] + counts["retrying"] + counts["processing"] == 0:
            break
        assert time.monotonic() < deadline and worker.proc.poll() is None, worker.log()
        time.sleep(0.3)
    assert counts["failed"] == 0 and counts["completed"] + counts["dead_letter"] == counts["total"], counts
