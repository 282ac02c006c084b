"""``runnerq-fast loadtest`` end to end on the embedded SQLite default: serve, workers and locust as processes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import pytest

from tests.acceptance.helpers import REPO, run_cli

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
    assert done.stderr.startswith("error: load test failed") and "Connection refused" in done.stderr
    assert "s3cret" not in done.stdout + done.stderr
