"""``runnerq-fast workers``: a real worker process shows up in the registry and leaves it at a clean stop."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

from tests.acceptance.helpers import WorkerProcess, run_cli

HERE = Path(__file__).parent


def test_workers_lists_a_running_worker_process_and_forgets_it_after_sigterm(
    tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    worker = start_worker("sleepy_app:engine", "--backend", url, "--concurrency", "3", cwd=HERE)
    worker.wait_for_log("started")
    listed = run_cli("workers", "--backend", url, "--json")
    assert listed.returncode == 0, listed.stderr
    (entry,) = json.loads(listed.stdout)["workers"]
    assert entry["pid"] == worker.pid and entry["queue"] == "sleepy" and entry["activity_types"] == ["nap"]
    assert entry["concurrency"] == 3 and entry["in_flight"] == 0
    table = run_cli("workers", "--backend", url, "--queue", "sleepy", COLUMNS="200")
    assert table.returncode == 0 and "live workers of queue 'sleepy': 1" in table.stdout
    assert entry["worker_id"] in table.stdout
    # "in flight 16/8" read as 16 running on 8 slots (issue 27 item 7b): two named columns and what held counts
    header = next(line for line in table.stdout.splitlines() if "worker id" in line)
    assert "held" in header and "slots" in header and "in flight" not in header, table.stdout
    row = next(line for line in table.stdout.splitlines() if entry["worker_id"] in line)
    assert [c.strip() for c in row.split("│")][6:8] == ["0", "3"], row  # held, slots
    assert "held: activities claimed and not yet acknowledged" in " ".join(table.stdout.split()), table.stdout
    other = run_cli("workers", "--backend", url, "--queue", "elsewhere", "--json")
    assert json.loads(other.stdout) == {"workers": []}
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    after = run_cli("workers", "--backend", url, "--json")
    assert after.returncode == 0 and json.loads(after.stdout) == {"workers": []}
