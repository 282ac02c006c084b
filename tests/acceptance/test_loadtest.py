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
    # 5 req/s per user: 200 ms for each answer, so a busy machine does not leave locust short of the rate asked
    done = run_cli("loadtest", "--duration", "10", "--users", "24", "--rate", "120", "--workers", "1",
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
    assert "thresholds" in done.stdout and "\nPASSED: " in done.stdout
    assert s["verdict"]["status"] == "passed" and s["verdict"]["line"].startswith("PASSED: ")
    sent = {c["name"]: c for c in s["checks"]}["sent / asked rate"]
    assert sent["ok"] and sent["value"] >= 0.9  # locust sent the 120 req/s asked


@pytest.mark.timeout(150)
def test_a_generator_that_cannot_send_the_rate_asked_makes_the_run_inconclusive_exit_3(tmp_path: Path) -> None:
    # one user cannot send 100,000 requests/s: it waits for each answer. Nothing else breaks (p99 limit 60 s),
    # so the run is neither a pass (the rate asked was not tested) nor a failure of the queue
    done = run_cli("loadtest", "--duration", "3", "--users", "1", "--http-weight", "1", "--api-weight", "0",
                   "--rate", "100000", "--workers", "1", "--max-p99-ms", "60000", "--output", str(tmp_path / "out"),
                   "--locustfile", LOCUSTFILE, timeout=140, cwd=tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr
    s = msgspec.json.decode((tmp_path / "out" / "summary.json").read_bytes())
    assert s["passed"] is False and s["verdict"]["status"] == "inconclusive"
    assert [c["name"] for c in s["checks"] if not c["ok"]] == ["sent / asked rate"]
    line = s["verdict"]["line"]
    assert line.startswith("INCONCLUSIVE: locust sent ") and "of the 100,000 asked" in line and "\n" not in line
    assert "100,000 req/s was not tested" in line or "overloaded machine" in line
    assert s["counts"]["lost"] == 0
    assert "INCONCLUSIVE: locust sent" in done.stdout


@pytest.mark.timeout(150)
def test_capacity_stops_at_the_first_step_that_breaks(tmp_path: Path) -> None:
    # an enqueue→start limit of 1 µs: the first step breaks, judged live, and the load stops before its 5 steps
    done = run_cli("loadtest", "--capacity", "--step-seconds", "3", "--max-steps", "5", "--rate", "10", "--users", "2",
                   "--workers", "1", "--max-p99-ms", "0.001", "--output", str(tmp_path / "out"),
                   "--locustfile", LOCUSTFILE, timeout=140, cwd=tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr
    s = msgspec.json.decode((tmp_path / "out" / "summary.json").read_bytes())
    cap = s["capacity"]
    assert cap["broke_step"] == 1 and cap["sustained_rate"] is None
    assert cap["stopped_live"].startswith("step 1: enqueue→start p99 ")
    steps = cap["steps"]
    assert 1 <= len(steps) < 5 and steps[0]["asked_rate"] == 10 and steps[0]["users"] == 2
    assert not steps[0]["ok"] and steps[0]["late"] > 0
    assert s["verdict"]["line"].startswith("INCONCLUSIVE: the first step (10 req/s) already broke: enqueue→start p99")
    assert s["counts"]["lost"] == 0 and s["drained"] is True
    assert "capacity steps" in done.stdout and "step 1 broke: stopping the load" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_capacity_reports_the_highest_step_that_held(tmp_path: Path) -> None:
    done = run_cli("loadtest", "--capacity", "--step-seconds", "4", "--max-steps", "3", "--rate", "10", "--users", "2",
                   "--workers", "1", "--max-p99-ms", "60000", "--output", str(tmp_path / "out"),
                   "--locustfile", LOCUSTFILE, timeout=190, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    s = msgspec.json.decode((tmp_path / "out" / "summary.json").read_bytes())
    cap = s["capacity"]
    assert [(st["step"], st["users"], st["asked_rate"], st["ok"]) for st in cap["steps"]] == \
        [(1, 2, 10, True), (2, 4, 20, True), (3, 6, 30, True)]
    assert all(st["sent_rate"] >= 0.9 * st["asked_rate"] for st in cap["steps"])
    assert (cap["sustained_rate"], cap["sustained_step"], cap["broke_step"], cap["stopped_live"]) == (30, 3, None, None)
    assert s["verdict"]["line"].startswith("CAPACITY: 30 req/s sustained")
    assert "all 3 steps held" in s["verdict"]["line"] and s["passed"] is True


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_threshold_that_is_not_met_exits_1(tmp_path: Path) -> None:
    done = run_cli("loadtest", "--duration", "3", "--users", "4", "--rate", "20", "--workers", "1",
                   "--max-p99-ms", "0.001", "--output", str(tmp_path / "out"), "--locustfile", LOCUSTFILE,
                   timeout=140, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    s = msgspec.json.decode((tmp_path / "out" / "summary.json").read_bytes())
    assert s["passed"] is False
    assert [c["name"] for c in s["checks"] if not c["ok"]] == ["enqueue→start p99 ms"]
    assert "FAILED: enqueue→start p99 " in done.stdout


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
        (("--capacity", "--shape", "step"), "drop --shape"),
        (("--capacity", "--locust-processes", "2"), "one locust process"),
        (("--capacity", "--rate", "0"), "not 0"),
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

