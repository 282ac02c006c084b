"""Private PostgreSQL and Redis servers for fault tests: started, stopped and restarted by the test.

The shared servers (PostgreSQL on 5432, Redis on 6379) are never touched:
each server here runs on a free port with its data in the test's temporary
directory and is killed at teardown. PostgreSQL comes from ``initdb`` /
``pg_ctl`` under ``/usr/lib/postgresql/*/bin`` (run as the ``postgres`` user
when the tests run as root, which ``initdb`` refuses); Redis from
``redis-server`` on PATH. Fixtures skip when a binary is missing.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

__all__ = [
    "PrivatePostgres",
    "RedisServer",
    "free_port",
    "fresh_database",
    "have_redis_server",
    "postgres_bin",
    "running_postgres",
]


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on (bound and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def postgres_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` that has ``initdb`` and ``pg_ctl``, if any."""
    root = Path("/usr/lib/postgresql")
    found = sorted(
        (p / "bin" for p in root.iterdir() if (p / "bin" / "initdb").exists() and (p / "bin" / "pg_ctl").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    ) if root.is_dir() else []
    return found[-1] if found else None


class PrivatePostgres:
    """A PostgreSQL cluster of its own (``initdb`` in a new temporary directory) on a free port, trust auth.

    Parameters
    ----------
    bindir : Path
        ``/usr/lib/postgresql/<version>/bin``.

    Notes
    -----
    The directory is made with :func:`tempfile.mkdtemp` (not pytest's
    ``tmp_path``, whose parents the ``postgres`` user cannot enter) and
    removed by :meth:`kill`.
    """

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="runnerq-pg-"))
        self.data = self.directory / "pgdata"
        self.log = self.directory / "postgres.log"
        self._user: str | None = "postgres" if os.geteuid() == 0 else None
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(self.directory, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 50\n"
                "shared_buffers = 16MB\nautovacuum = off\n"
            )

    def url(self, database: str = "postgres") -> str:
        """``postgresql://postgres@127.0.0.1:<port>/<database>``."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bindir / tool), *args]
        if self._user is not None:
            cmd = ["runuser", "-u", self._user, "--", *cmd]
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr.decode(errors='replace')}")

    def start(self) -> None:
        """Start the server and wait until it accepts connections (``pg_ctl -w``)."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "30", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` terminates every session, ``immediate`` is a crash."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop")

    def kill(self) -> None:
        """Stop it if it still runs and remove its directory (teardown); never raises."""
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.directory, ignore_errors=True)


@contextlib.contextmanager
def running_postgres() -> Iterator[PrivatePostgres]:
    """A started :class:`PrivatePostgres`, killed and removed afterwards; skips the test without initdb."""
    bindir = postgres_bin()
    if bindir is None:
        pytest.skip("initdb/pg_ctl not found under /usr/lib/postgresql/*/bin")
    server = PrivatePostgres(bindir)
    try:
        server.start()
        yield server
    finally:
        server.kill()


async def fresh_database(server: PrivatePostgres) -> str:
    """The URL of a new, empty database on ``server`` (tests share a server, not data)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(server.url())
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return server.url(name)


class RedisServer:
    """A private redis-server process on a free port, restartable with the same data directory."""

    def __init__(self, directory: Path, *args: str) -> None:
        self.directory = directory
        self.args = args
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        cmd = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--daemonize",
            "no",
            "--logfile",
            str(self.directory / "redis.log"),
            *self.args,
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2) as c:
                c.sendall(b"PING\r\n")
                if c.recv(64).startswith(b"+PONG"):
                    return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)
        self.proc = None


def have_redis_server() -> bool:
    """Whether ``redis-server`` is on PATH."""
    return shutil.which("redis-server") is not None
