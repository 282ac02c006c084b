"""Fixtures for tests against a real PostgreSQL server (a pytest plugin).

Registered for the whole suite by ``pytest_plugins`` in ``tests/conftest.py``,
so the integration and the fault tests share them: ``pg_template``,
``pg_databases``, ``pg_url``, ``pg_empty_url`` and ``pg_backend``.

Each test gets a FRESH database, copied from a template that is migrated once
per session (``CREATE DATABASE ... TEMPLATE`` copies it, 100-250 ms on a busy
machine), and dropped afterwards. The copy for the next test is made while a
test runs (``pg_databases``: one database ahead, in a thread of its own), so a
test waits for none but the first. The server comes from ``RUNNERQ_TEST_PG`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``, the maintenance database).

If the server is unreachable the tests are skipped, unless ``CI=true``: then
they fail, so a broken CI service never passes silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from runnerq_fast.backends.postgres import PostgresBackend, apply_migrations

ADMIN_URL = os.environ.get("RUNNERQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def database_url(name: str) -> str:
    """``ADMIN_URL`` pointing at database ``name``."""
    parts = urlsplit(ADMIN_URL)
    return urlunsplit(parts._replace(path="/" + name))


def _in_thread(coro: Any) -> Any:
    """Run a coroutine to completion on a private loop in another thread.

    Session fixtures use this so they never touch the tests' event loops.
    """
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def _create_template(name: str) -> None:
    admin = await asyncpg.connect(ADMIN_URL, timeout=5)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    conn = await asyncpg.connect(database_url(name), timeout=5)
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()


async def _drop(name: str) -> None:
    admin = await asyncpg.connect(ADMIN_URL, timeout=5)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """Name of a migrated template database (created once per session)."""
    name = f"rq_template_{os.getpid()}"
    try:
        _in_thread(_create_template(name))
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
        message = f"PostgreSQL at {ADMIN_URL} is not usable: {exc!r}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    yield name
    _in_thread(_drop(name))


async def _fresh_database(template: str | None) -> str:
    name = f"rq_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(ADMIN_URL, timeout=5)
    try:
        if template is None:
            await admin.execute(f'CREATE DATABASE "{name}"')
        else:
            await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    finally:
        await admin.close()
    return name


class FreshDatabases:
    """Copies of the template made one ahead of the tests that take them, in a thread of their own.

    Each :meth:`take` hands over the copy made meanwhile (or being made) and starts the next, so
    the ``CREATE DATABASE`` of test n+1 runs while test n does. Every copy is still a new database,
    used by one test only.
    """

    def __init__(self, template: str) -> None:
        self.template = template
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="pg-fresh-db")
        self._next: Future[str] | None = None

    def _copy(self) -> Future[str]:
        return self._thread.submit(asyncio.run, _fresh_database(self.template))

    def take(self) -> Future[str]:
        """The name of a fresh copy (a future: it may still be being made); the next one is started."""
        taken = self._next if self._next is not None else self._copy()
        self._next = self._copy()
        return taken

    def close(self) -> None:
        """Drop the copy no test took, and stop the thread."""
        if self._next is not None:
            with contextlib.suppress(Exception):  # a copy that failed left nothing to drop
                self._thread.submit(asyncio.run, _drop(self._next.result())).result()
        self._thread.shutdown()


@pytest.fixture(scope="session")
def pg_databases(pg_template: str) -> Iterator[FreshDatabases]:
    """Fresh copies of ``pg_template``, each made while the test before runs."""
    databases = FreshDatabases(pg_template)
    yield databases
    databases.close()


@pytest.fixture
async def pg_url(pg_databases: FreshDatabases) -> AsyncIterator[str]:
    """URL of a fresh, migrated database, dropped after the test."""
    name = await asyncio.wrap_future(pg_databases.take())
    try:
        yield database_url(name)
    finally:
        await _drop(name)


@pytest.fixture
async def pg_empty_url(pg_template: str) -> AsyncIterator[str]:
    """URL of a fresh database with NO schema (for migration tests)."""
    name = await _fresh_database(None)
    try:
        yield database_url(name)
    finally:
        await _drop(name)


@pytest.fixture
async def pg_backend(pg_url: str) -> AsyncIterator[PostgresBackend]:
    """An opened :class:`PostgresBackend` on a fresh database."""
    backend = await PostgresBackend.open(pg_url, migrate=False)
    try:
        yield backend
    finally:
        await backend.close()
