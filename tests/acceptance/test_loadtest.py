"""``runnerq-fast loadtest`` end to end on the embedded SQLite default: serve, workers and locust as processes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from runnerq_fast.loadtest.mix import Mix
from tests.acceptance.helpers import REPO, run_cli, subprocess_env

LOCUSTFILE = str(REPO / "loadtest" / "locustfile.py")


@pytest.mark.timeout(150)
def test_a_ten_second_load_test_on_sqlite_loses_nothing_and_writes_every_output(tmp_path: Path) -> None:
    done = run_cli("loadtest", "--duration", "10", "--users", "6", "--rate", "120", "--workers", "1",
                   "--output", str(tmp_path / "out"), "--locustfile", LOCUSTFILE, timeout=140, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "out"
    for name in ("locust_stats.csv", "locust_failures.csv", "locust.html", "summary.json", "chart.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    s = msgspec.json.decode((out / "summary.json").read_bytes())
    assert s["passed"] is True
    counts = s["counts"]
    assert counts["accepted_unique"] > 300
    assert counts["lost"] == 0 and counts["completed"] == counts["accepted_unique"]
    # the records agree with the store: every accepted activity is completed there, nothing else is left
    db = tmp_path / "runnerq-loadtest.db"  # the default: a SQLite file in the working directory
    with sqlite3.connect(db) as conn:
        rows = dict(conn.execute("SELECT status, count(*) FROM runnerq_activities WHERE queue_name = ? GROUP BY status",
                                 (s["run"]["queue"],)).fetchall())
    assert rows.get("completed", 0) >= counts["accepted_unique"]
    assert set(rows) == {"completed"}
    # both kinds of users ran, single and batch; the flaky share failed once each and was retried
    names = set(s["locust"]["by_name"])
    assert {"POST single", "POST batch", "api execute"} <= names
    assert s["errors"]["handler"].get("RetryableError", 0) > 0
    assert s["latency"]["enqueue_to_start"]["count"] >= counts["accepted_unique"]
    assert s["latency"]["enqueue_to_start"]["p50_ms"] > 0
    assert len(s["series"]["backlog"]) >= 8
    assert "thresholds" in done.stdout and "PASSED" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_threshold_that_is_not_met_exits_1(tmp_path: Path) -> None:
    done = run_cli("loadtest", "--duration", "3", "--users", "2", "--rate", "20", "--workers", "1",
                   "--max-p99-ms", "0.001", "--output", str(tmp_path / "out"), "--locustfile", LOCUSTFILE,
                   timeout=140, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    s = msgspec.json.decode((tmp_path / "out" / "summary.json").read_bytes())
    assert s["passed"] is False
    assert [c["name"] for c in s["checks"] if not c["ok"]] == ["enqueue→start p99 ms"]
    assert "FAILED" in done.stdout


def test_an_output_directory_holding_a_run_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out" / "records").mkdir(parents=True)
    (tmp_path / "out" / "records" / "runs-1.tsv").write_text("")
    done = run_cli("loadtest", "--output", str(tmp_path / "out"), "--locustfile", LOCUSTFILE, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "already holds a run" in done.stderr


def test_the_api_agent_enqueues_through_the_python_api_and_answers_each_request(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agent.db'}"
    specs = Mix(seed=3).batch(3, now=time.time())
    keyed = msgspec.structs.replace(specs[0], idempotency_key="k-1", type="notify")
    lines = [[1, True, [specs[1]]], [2, False, [specs[1], specs[2]]], [3, True, [keyed]], [4, True, [keyed]]]
    stdin = b"".join(msgspec.json.encode(line) + b"\n" for line in lines) + b'[5, true, [{"type": "x"'  # cut
    done = subprocess.run([sys.executable, "-m", "runnerq_fast.loadtest.agent", "--backend", url, "--queue", "q"],
                          input=stdin, capture_output=True, timeout=30, check=False, env=subprocess_env())
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode().splitlines()
    assert out[0] == "ready"
    answers = {a[0]: a for a in (msgspec.json.decode(line) for line in out[1:])}
    assert sorted(answers) == [1, 2, 3, 4]  # the cut last line is no request
    assert all(a[3] is None and a[4] > 0 for a in answers.values())
    assert len(answers[2][1]) == 2 and answers[2][2] == [True, True]
    assert answers[4][1] == answers[3][1] and answers[4][2] == [False]  # the key returned the first one
    with sqlite3.connect(tmp_path / "agent.db") as conn:
        rows = conn.execute("SELECT id, priority FROM runnerq_activities WHERE queue_name = 'q'").fetchall()
    stored = dict(rows)
    ids = [i for a in answers.values() for i in a[1]]
    assert set(ids) == set(stored) and len(stored) == 4
    assert stored[answers[1][1][0]] == specs[1].priority_number


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--backend", "memory://"), "shared by processes"),
        (("--http-weight", "0", "--api-weight", "0"), "no users"),
        (("--locustfile", "/nonexistent/locustfile.py"), "no such file"),
        (("--shape", "step", "--locust-processes", "2"), "one locust process"),
    ],
)
def test_bad_input_exits_2_before_starting_anything(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    done = run_cli("loadtest", *args, "--output", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert not (tmp_path / "out").exists()


def test_an_unreachable_store_is_one_error_line_and_exit_1(tmp_path: Path) -> None:
    done = run_cli("loadtest", "--backend", "postgresql://postgres:s3cret@127.0.0.1:1/nothing", "--output",
                   str(tmp_path / "out"), "--locustfile", LOCUSTFILE, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    # one line: the load test's own ("error: load test failed: ...") or the store's ("error: cannot connect ...")
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Connection refused" in done.stderr and "Traceback" not in done.stderr
    assert "s3cret" not in done.stdout + done.stderr


def test_a_redis_cluster_url_is_accepted_and_an_unreachable_cluster_is_one_error_line(tmp_path: Path) -> None:
    # redis+cluster:// was refused as "not a store shared by processes" (exit 2) before anything started
    done = run_cli("loadtest", "--backend", "redis+cluster://:s3cret@127.0.0.1:1", "--output",
                   str(tmp_path / "out"), "--locustfile", LOCUSTFILE, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "shared by processes" not in done.stderr and "Traceback" not in done.stderr
    assert "s3cret" not in done.stdout + done.stderr

