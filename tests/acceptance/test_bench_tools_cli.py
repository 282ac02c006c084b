"""benchmarks/gate.py and benchmarks/compare.py as a user runs them: bad input is one line and exit 2.

Nothing is measured: each case is refused before any build or run starts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_gate_refuses_a_floors_file_without_a_reason_for_an_override(tmp_path: Path) -> None:
    text = (REPO / "benchmarks" / "gate_floors.toml").read_text()
    bad = tmp_path / "floors.toml"
    bad.write_text(text.replace("\n[figures]\n", '\n[figures]\n"redis.drain" = { fail_below = 0.5 }\n', 1))
    proc = _run("benchmarks/gate.py", "--floors", str(bad))
    assert proc.returncode == 2
    assert proc.stdout.strip().splitlines() == [f"gate: error: {bad}: figure 'redis.drain' has its own floor but "
                                                "no reason"]


@pytest.mark.parametrize(("args", "message"), [
    (["--backends", "memory,mysql"], "unknown backend(s): mysql"),
    (["--baseline", "no-such-ref-anywhere"], "is not a commit"),
])
def test_gate_refuses_bad_options_before_measuring(args: list[str], message: str) -> None:
    proc = _run("benchmarks/gate.py", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stdout and "Traceback" not in proc.stdout + proc.stderr


def test_compare_refuses_an_unknown_entry() -> None:
    proc = _run("benchmarks/compare.py", "--only", "sidekiq", "--png", "")
    assert proc.returncode == 2
    assert "no entry matches 'sidekiq'" in proc.stderr
