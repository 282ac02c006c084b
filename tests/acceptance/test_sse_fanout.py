"""``benchmarks/sse_fanout.py`` run small: a real ``serve``, streams in a process of their own, HTTP enqueues.

Every stream must deliver every event exactly once (no stream is slow enough
to be told to resync at this size), and the report must carry the figures
the README quotes (enqueue ratio, GET p99, server CPU per event per stream).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sse_fanout.py"


@pytest.mark.slow
def test_sse_fanout_benchmark_delivers_every_event_to_every_stream(tmp_path: Path) -> None:
    out = tmp_path / "sse.json"
    subprocess.run([sys.executable, str(SCRIPT), "--streams", "30", "--enqueues", "1500", "--drain-timeout", "40",
                    "--output-json", str(out)], check=True, timeout=55, capture_output=True)
    report = json.loads(out.read_text())
    base, run = report["runs"]
    assert base["streams"] == 0 and base["failed"] == 0 and run["failed"] == 0
    assert run["streams"] == 30 and not run["timed_out"] and run["resynced"] == 0
    assert run["events_received"] == 30 * 1500
    assert run["gaps"] == run["duplicates"] == run["streams_with_gaps_or_duplicates"] == 0
    assert run["get_samples"] > 0 and run["get_p99_ms"] >= run["get_p50_ms"] > 0
    assert run["enqueue_ratio"] == round(run["enqueue_s"] / base["enqueue_s"], 2)
    assert "server_cpu_us_per_event_per_stream" in run and run["server_cpu_s"] > 0
