"""Services of ``benchmarks/gate.py`` and ``benchmarks/compare.py``: a private Redis, fresh PostgreSQL databases.

Neither tool writes to the shared servers' existing data:

* :class:`PrivateRedis` starts a ``redis-server`` of its own on a free
  loopback port (no persistence, as the CI server runs) and stops it at the
  end, so a run can use any of its databases and leaves nothing behind;
* :class:`PgDatabases` creates uniquely named databases (``rqbench_<hex>_<name>``)
  on the PostgreSQL server and drops them at the end.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

import asyncpg

__all__ = ["PgDatabases", "PrivateRedis", "ServiceUnavailable", "free_port"]


class ServiceUnavailable(RuntimeError):
    """A server the run needs cannot be reached or started."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrivateRedis:
    """A ``redis-server`` started for one run, on a free port, without persistence.

    Use as a context manager; :meth:`url` gives ``redis://127.0.0.1:<port>/<db>``.

    Raises
    ------
    ServiceUnavailable
        If ``redis-server`` is not on ``PATH`` or does not answer within 10 s.
    """

    def __init__(self) -> None:
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    def url(self, db: int = 0) -> str:
        """URL of database ``db`` of this server."""
        return f"redis://127.0.0.1:{self.port}/{db}"

    def __enter__(self) -> PrivateRedis:
        exe = shutil.which("redis-server")
        if exe is None:
            raise ServiceUnavailable("redis-server is not on PATH")
        self._dir = tempfile.TemporaryDirectory(prefix="rqbench-redis-")
        self.port = free_port()
        self._proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self._dir.name, "--databases", "64"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        self.__exit__(None, None, None)
        raise ServiceUnavailable(f"a private redis-server on port {self.port} did not start")

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


class PgDatabases:
    """Fresh PostgreSQL databases for one run, dropped at the end.

    Parameters
    ----------
    admin_url : str
        A database URL of a user allowed to ``CREATE DATABASE`` (e.g. the
        ``postgres`` maintenance database).

    Raises
    ------
    ServiceUnavailable
        If the server does not answer within 5 s.
    """

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.run_id = uuid.uuid4().hex[:10]
        self.created: list[str] = []

    def url(self, database: str) -> str:
        """``admin_url`` pointing at ``database``."""
        return urlunsplit(urlsplit(self.admin_url)._replace(path="/" + database))

    def create(self, name: str) -> str:
        """Create ``rqbench_<run>_<name>`` and return its URL."""
        database = f"rqbench_{self.run_id}_{name}"
        asyncio.run(self._execute(f'CREATE DATABASE "{database}"'))
        self.created.append(database)
        return self.url(database)

    def drop(self, url: str) -> None:
        """Drop a database :meth:`create` made (given by its URL)."""
        database = urlsplit(url).path.lstrip("/")
        if database in self.created:
            asyncio.run(self._execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
            self.created.remove(database)

    async def _execute(self, sql: str) -> None:
        try:
            conn = await asyncpg.connect(self.admin_url, timeout=5)
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            raise ServiceUnavailable(f"PostgreSQL at {_redact(self.admin_url)}: {type(exc).__name__}: {exc}") from exc
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    def __enter__(self) -> PgDatabases:
        asyncio.run(self._execute("SELECT 1"))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for database in list(self.created):
            self.drop(self.url(database))


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def temp_dir(prefix: str) -> Path:
    """A new temporary directory (the caller removes it)."""
    return Path(tempfile.mkdtemp(prefix=prefix))
