"""Schemathesis against a real ``runnerq-fast serve`` (SQLite file, real port): the document is the contract.

Every documented operation is generated from ``/api/openapi.json`` (examples, coverage, fuzzing and stateful
phases, positive and negative data) and every response checked: no 5xx, a documented status, content type,
headers and body, valid data accepted, invalid data refused, ``Allow`` on 405, a write without its token
refused. Three servers: writes open, writes behind a bearer token, and read-only (whose document has no
writes). The SSE stream (``GET /api/observability/stream``) never ends, so it is left out here; its own tests
(``tests/unit/test_web_stream.py``, ``test_serve.py``) cover it.

``tests/acceptance/schemathesis_hooks.py`` shapes the few inputs JSON Schema cannot state (see there).
Examples per operation: ``RUNNERQ_SCHEMATHESIS_EXAMPLES`` (default 25); seed: ``RUNNERQ_SCHEMATHESIS_SEED``
(default: a fresh one, printed in the output on failure).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.acceptance.helpers import REPO, subprocess_env
from tests.acceptance.serve_helpers import ServeProcess

STREAM = "/api/observability/stream"
TOKEN = "schemathesis-token"
# Checks that need what this API has not: several users (object_level_authorization).
EXCLUDED_CHECKS = "object_level_authorization"


def schemathesis_command() -> list[str]:
    """argv prefix that runs the Schemathesis CLI of this interpreter."""
    script = Path(sys.executable).with_name("schemathesis")
    return [str(script)] if script.exists() else [sys.executable, "-m", "schemathesis.cli"]


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["open", "token", "read-only"])
def test_schemathesis_finds_no_failure(
    mode: str, tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    args = {"open": [], "token": ["--token", TOKEN], "read-only": ["--read-only"]}[mode]
    server = start_serve("--backend", f"sqlite:///{tmp_path / 'st.db'}", *args)
    doc = httpx.get(f"{server.base_url}/api/openapi.json", timeout=10).json()
    operations = [(m.upper(), p) for p, ops in doc["paths"].items() for m in ops if p != STREAM]
    has_writes = any(m != "GET" for m, _ in operations)
    assert has_writes is (mode != "read-only")
    config = tmp_path / "schemathesis.toml"
    config.write_text(f'[auth.openapi.bearer]\nbearer = "{TOKEN}"\n' if mode == "token" else "")
    hook_log = tmp_path / "hooks.log"
    seed = os.environ.get("RUNNERQ_SCHEMATHESIS_SEED")
    cmd = [
        *schemathesis_command(), "--config-file", str(config), "run", f"{server.base_url}/api/openapi.json",
        "--workers", "1", "--max-examples", os.environ.get("RUNNERQ_SCHEMATHESIS_EXAMPLES", "25"),
        "--checks", "all", "--exclude-checks", EXCLUDED_CHECKS, "--exclude-path", STREAM,
        "--generation-database", "none", "--request-timeout", "10", "--no-color",
        *(["--seed", seed] if seed else []),
    ]
    env = subprocess_env(SCHEMATHESIS_HOOKS="tests.acceptance.schemathesis_hooks",
                         RUNNERQ_SCHEMATHESIS_HOOK_LOG=str(hook_log), COLUMNS="200",
                         PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=220)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-20000:]
    tested = re.search(r"Tested:\s+(\d+)", out)
    cases = re.search(r"(\d+) generated, (\d+) passed", out)
    assert tested and cases, out[-5000:]
    assert int(tested[1]) == len(operations), out[-5000:]
    assert int(cases[1]) == int(cases[2]) > 10 * len(operations), out[-5000:]
    # the hooks ran, on every operation tested
    called = set(hook_log.read_text().splitlines())
    assert {f"{m} {p}" for m, p in operations} <= called
    print(f"{mode}: {tested[1]} operations, {cases[1]} cases, 0 failures")
    assert server.stop() == 0
