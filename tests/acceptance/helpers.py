"""Helpers for the acceptance tests: running the CLI and worker subprocesses.

The CLI runs as a real subprocess: the installed ``runnerq-fast`` script next
to ``sys.executable`` when present (so packaging is exercised), else
``python -m runnerq_fast.cli``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any

import pytest

__all__ = ["REPO", "WorkerProcess", "cli_command", "eventually", "run_cli", "subprocess_env"]

REPO = Path(__file__).resolve().parents[2]
"""Repository root (the examples are importable from here)."""

HERE = Path(__file__).resolve().parent
"""This directory (``sleepy_app`` is importable from here)."""


def cli_command() -> list[str]:
    """argv prefix that runs the CLI in a fresh interpreter."""
    script = Path(sys.executable).with_name("runnerq-fast")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "runnerq_fast.cli"]


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for CLI subprocesses: no inherited ``RUNNERQ_BACKEND``, unbuffered output."""
    env = {k: v for k, v in os.environ.items() if k != "RUNNERQ_BACKEND"}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_cli(*args: str, timeout: float = 20.0, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``runnerq-fast ARGS`` to completion and capture its output as text.

    Parameters
    ----------
    *args : str
        Command-line arguments after the program name.
    timeout : float
        Seconds before the process is killed and the test fails.
    cwd : Path
        Working directory (default: the repository root).
    **env : str
        Extra environment variables.
    """
    return subprocess.run(
        [*cli_command(), *args], cwd=cwd, env=subprocess_env(**env), capture_output=True, text=True,
        timeout=timeout, check=False,
    )


class WorkerProcess:
    """A ``runnerq-fast worker`` subprocess whose output goes to a log file.

    Parameters
    ----------
    args : list of str
        Arguments after ``runnerq-fast``.
    log_path : Path
        File receiving stdout and stderr.
    cwd : Path
        Working directory.
    env : dict of str to str, optional
        Extra environment variables.
    """

    def __init__(self, args: list[str], log_path: Path, cwd: Path = REPO, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("wb")
        self.proc = subprocess.Popen(
            [*cli_command(), *args], cwd=cwd, env=subprocess_env(**(env or {})), stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        """Process id."""
        return self.proc.pid

    def log(self) -> str:
        """Everything the worker wrote so far."""
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 10.0) -> None:
        """Block until ``text`` appears in the log; fail on exit or after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if self.proc.poll() is not None:
                pytest.fail(f"worker exited with {self.proc.returncode} before logging {text!r}:\n{self.log()}")
            if time.monotonic() > deadline:
                pytest.fail(f"worker did not log {text!r} within {timeout} s:\n{self.log()}")
            time.sleep(0.02)

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the worker."""
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 10.0) -> int:
        """Wait for exit; return the exit code (negative: killed by that signal)."""
        return self.proc.wait(timeout)

    def close(self) -> None:
        """Kill the worker if it still runs and release the log file."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Await ``check()`` every ``interval`` seconds until it returns a truthy value.

    Raises
    ------
    AssertionError
        If ``timeout`` seconds pass first.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)
