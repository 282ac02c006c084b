"""A ``runnerq-fast serve`` subprocess on a free loopback port, for the acceptance tests."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

import pytest

from tests.acceptance.helpers import REPO, cli_command, subprocess_env
from tests.web_helpers import free_port

__all__ = ["ServeProcess"]


class ServeProcess:
    """``runnerq-fast serve ARGS --port P`` with its output in ``log_path``; waits until it listens.

    Parameters
    ----------
    args : list of str
        Arguments after ``runnerq-fast serve`` (no ``--port``).
    log_path : Path
        File receiving stdout and stderr.
    port : int, optional
        The port (default: a free one).
    env : dict, optional
        Extra environment variables.
    """

    def __init__(self, args: list[str], log_path: Path, port: int | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.port = port or free_port()
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("ab")
        self.proc = subprocess.Popen(
            [*cli_command(), "serve", *args, "--port", str(self.port), "--log-level", "warning"],
            cwd=REPO, env=subprocess_env(**(env or {})), stdout=self._log, stderr=subprocess.STDOUT,
        )
        self.base_url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 20
        while not re.search(rf"listening on http://127\.0\.0\.1:{self.port}\b", self.log()):
            if self.proc.poll() is not None:
                pytest.fail(f"serve exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                pytest.fail(f"serve did not start within 20 s:\n{self.log()}")
            time.sleep(0.02)

    def log(self) -> str:
        """Everything the server wrote so far."""
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, then wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def close(self) -> None:
        """Kill the server if it still runs and release the log file."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()
