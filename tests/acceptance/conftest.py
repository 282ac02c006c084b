"""Fixtures for the acceptance tests: worker and serve subprocesses, and fresh PostgreSQL databases.

The PostgreSQL server comes from ``RUNNERQ_TEST_PG`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``, the maintenance database);
each test gets its own ``rq_acc_<random>`` database, created empty (the code
under test migrates it) and dropped afterwards. If the server is unreachable
the PostgreSQL tests are skipped, unless ``CI=true``: then they fail.

The tests here are plain (sync) functions that drive their own event loop
with ``asyncio.run`` where they need a backend, so they run once, not once per
loop like the async unit tests.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from tests.acceptance.helpers import REPO, WorkerProcess
from tests.acceptance.serve_helpers import ServeProcess

ADMIN_URL = os.environ.get("RUNNERQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Factory starting worker subprocesses; every one is killed and reaped at teardown."""
    workers: list[WorkerProcess] = []

    def start(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> WorkerProcess:
        w = WorkerProcess(["worker", *args], tmp_path / f"worker-{len(workers)}.log", cwd, env)
        workers.append(w)
        return w

    yield start
    for w in workers:
        w.close()


@pytest.fixture
def start_serve(tmp_path: Path) -> Iterator[Callable[..., ServeProcess]]:
    """Factory for serve subprocesses; every one is killed at teardown."""
    servers: list[ServeProcess] = []

    def start(*args: str, port: int | None = None, env: dict[str, str] | None = None) -> ServeProcess:
        s = ServeProcess(list(args), tmp_path / f"serve-{len(servers)}.log", port, env)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


# ------------------------------------------------------------------ PostgreSQL
def _database_url(name: str) -> str:
    return urlunsplit(urlsplit(ADMIN_URL)._replace(path="/" + name))


def _in_thread(coro: Any) -> Any:
    """Run a coroutine on a private loop in another thread (never the test's loop)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(ADMIN_URL, timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture
def fresh_pg_url() -> Iterator[str]:
    """URL of a fresh, empty PostgreSQL database, dropped after the test."""
    name = f"rq_acc_{uuid.uuid4().hex[:16]}"
    try:
        _in_thread(_admin(f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
        message = f"PostgreSQL at {ADMIN_URL} is not usable: {exc!r}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield _database_url(name)
    finally:
        _in_thread(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
