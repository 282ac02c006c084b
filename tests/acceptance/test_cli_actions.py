"""The operator actions on the command line (``cancel``, ``retry``, ``run-now``, ``set-priority``,
``delete``) as real subprocesses, on a SQLite file (no service needed) and on PostgreSQL; and a
running activity cancelled from the CLI under a ``runnerq-fast worker`` subprocess."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from tests.acceptance.helpers import HERE, WorkerProcess, run_cli


def _enqueue(url: str, *args: str) -> str:
    res = run_cli("enqueue", *args, "--backend", url)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def _activity(url: str, activity_id: str) -> dict[str, object]:
    res = run_cli("inspect", activity_id, "--json", "--backend", url)
    assert res.returncode == 0, res.stderr
    doc: dict[str, object] = json.loads(res.stdout)
    return doc


def _status(url: str, activity_id: str) -> str:
    activity = _activity(url, activity_id)["activity"]
    assert isinstance(activity, dict)
    return str(activity["status"])


def _stats(url: str) -> dict[str, int]:
    res = run_cli("stats", "--json", "--backend", url)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    return {k: int(v) for k, v in doc.items() if k != "queue"}


def _actions_round_trip(url: str) -> None:
    later = _enqueue(url, "mail", "--delay", "3600")
    now = _enqueue(url, "mail", "--payload", '{"n": 1}', "--metadata", '{"tenant": "t1"}')
    other = _enqueue(url, "report")

    res = run_cli("set-priority", "critical", "--type", "mail", "--backend", url)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == "re-prioritised 2, skipped 0 (not in a state set_priority applies to)"
    activity = _activity(url, later)["activity"]
    assert isinstance(activity, dict) and activity["priority"] == 4

    res = run_cli("run-now", later, "--json", "--backend", url)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {"action": "run_now", "changed": [later], "skipped": 0}
    assert _status(url, later) == "pending"

    res = run_cli("cancel", "--metadata", "tenant=t1", "--backend", url)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["cancelled 1, skipped 0 (not in a state cancel applies to)", now]
    events = _activity(url, now)["events"]
    assert isinstance(events, list) and events[-1]["event_type"] == "cancelled"

    res = run_cli("retry", now, other, "--json", "--backend", url)
    assert json.loads(res.stdout) == {"action": "retry", "changed": [now], "skipped": 1}  # `other` is pending
    assert _status(url, now) == "pending"

    run_cli("cancel", "--all", "--backend", url)
    assert _stats(url)["cancelled"] == 3
    res = run_cli("delete", "--status", "cancelled", "--type", "mail", "--json", "--backend", url)
    assert sorted(json.loads(res.stdout)["changed"]) == sorted([later, now])
    stats = _stats(url)
    assert stats["cancelled"] == 1 and stats["total"] == 1
    missing = run_cli("inspect", now, "--backend", url)
    assert missing.returncode == 1 and "no activity" in missing.stderr


def test_actions_on_a_sqlite_file(tmp_path: Path) -> None:
    _actions_round_trip(f"sqlite:///{tmp_path / 'ops.db'}")


def test_actions_on_postgres(fresh_pg_url: str) -> None:
    _actions_round_trip(fresh_pg_url)


BAD_INPUT = [
    (["cancel"], "give activity IDs or a filter option"),
    (["retry", "--status", "bogus"], "unknown status 'bogus'"),
    (["delete", "--all", "--limit", "0"], "--limit must be within"),
    (["run-now", "--created-after", "yesterday"], "neither ISO 8601"),
    (["run-now", "--created-before", "2026-01-01T00:00:00"], "has no time zone"),
    (["cancel", "--metadata", "tenant"], "is not KEY=VALUE"),
    (["set-priority", "normal", "--type", ""], "invalid activity type"),
]


def test_bad_input_exits_2_on_one_line_and_changes_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bad.db'}"
    aid = _enqueue(url, "t")
    for args, message in BAD_INPUT:
        res = run_cli(*args, "--backend", url)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert res.stderr.startswith("error: ") and message in res.stderr and res.stderr.count("\n") == 1, args
        assert "Traceback" not in res.stderr and res.stdout == ""
    activity = _activity(url, aid)
    assert isinstance(activity["activity"], dict) and activity["activity"]["status"] == "pending"
    assert isinstance(activity["events"], list) and [e["event_type"] for e in activity["events"]] == ["enqueued"]


def test_bad_priority_argument_is_a_usage_error(tmp_path: Path) -> None:
    res = run_cli("set-priority", "urgent", "--all", "--backend", f"sqlite:///{tmp_path / 'p.db'}")
    assert res.returncode == 2 and "low, normal, high, critical or 1-4" in res.stderr


def test_cancel_from_the_cli_stops_a_running_activity_in_a_worker(
    tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    url = f"sqlite:///{tmp_path / 'run.db'}"
    aid = _enqueue(url, "nap", "--payload", '{"seconds": 30}', "--queue", "sleepy")  # sleeps 30 s on attempt 1
    worker = start_worker("sleepy_app:engine", "--backend", url, "--lease-timeout", "3", cwd=HERE)
    deadline = time.monotonic() + 20
    while _status(url, aid) != "processing":
        assert time.monotonic() < deadline and worker.proc.poll() is None, worker.log()
        time.sleep(0.1)
    res = run_cli("cancel", aid, "--queue", "sleepy", "--backend", url)
    assert res.returncode == 0 and res.stdout.splitlines()[1] == aid, res.stderr
    t0 = time.monotonic()
    while _status(url, aid) != "cancelled":
        assert time.monotonic() < deadline, worker.log()
        time.sleep(0.05)
    assert time.monotonic() - t0 < 5  # about one heartbeat (lease 3 s / 3), not the 30 s nap
    events = _activity(url, aid)["events"]
    assert isinstance(events, list)
    kinds = [e["event_type"] for e in events]
    assert kinds.index("cancel_requested") < kinds.index("cancelled") and "retrying" not in kinds
    assert worker.proc.poll() is None  # the worker carries on


def test_an_action_on_an_unknown_id_says_so_and_exits_1(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ids.db'}"
    aid = _enqueue(url, "t", "--delay", "3600")
    res = run_cli("cancel", aid, "nosuchid", "--backend", url)
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert res.stdout.splitlines() == ["cancelled 1, skipped 0 (not in a state cancel applies to)", aid]
    assert res.stderr.splitlines() == ["queue 'default' (the only queue in this store)",  # no --queue: which one
                                       "error: no activity 'nosuchid' in queue 'default'"]
    # an id of another queue is not this queue's activity either
    res = run_cli("run-now", aid, "--queue", "other", "--backend", url)
    assert res.returncode == 1 and f"no activity {aid!r} in queue 'other'" in res.stderr
    assert _status(url, aid) == "cancelled"


def test_an_empty_or_unusable_queue_name_is_a_usage_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    _enqueue(url, "t")  # the store exists: what is refused is the name
    for args in (["stats", "--queue", ""], ["cancel", "--all", "--queue", " "], ["enqueue", "t", "--queue", ""],
                 ["stats", "--queue", "q" * 300], ["workers", "--queue", ""], ["prune", "--queue", " "],
                 ["enqueue", "t", "--queue", "."], ["serve", "--queue", ".."]):
        res = run_cli(*args, "--backend", url)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert "Invalid value for '--queue'" in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_a_number_option_refuses_nan_and_inf_before_anything_starts(tmp_path: Path) -> None:
    """``click.FloatRange`` lets NaN through (every comparison is false): ``loadtest --duration nan`` made a
    queue and a results folder, then failed with a ValueError (fresh-user run)."""
    for args in (["loadtest", "--duration", "nan", "--output", str(tmp_path / "out")],
                 ["worker", "x:y", "--lease-timeout", "inf"], ["worker", "x:y", "--shutdown-grace", "nan"]):
        res = run_cli(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert "is not a finite number" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / "out").exists()
