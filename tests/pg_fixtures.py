"""Fixtures for tests against a real PostgreSQL server (a pytest plugin).

Registered for the whole suite by ``pytest_plugins`` in ``tests/conftest.py``,
so the integration and the fault tests share them: ``pg_template``,
``pg_url``, ``pg_empty_url`` and ``pg_backend``.

Each test gets a FRESH database, copied from a template that is migrated once
per session (``CREATE DATABASE ... TEMPLATE`` is a file copy, ~50 ms), and
dropped afterwards. The server comes from ``RUNNERQ_TEST_PG`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``, the maintenance database).

If the server is unreachable the tests are skipped, unless ``CI=true``: then
they fail, so a broken CI service never passes silently.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
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


@pytest.fixture
async def pg_url(pg_template: str) -> AsyncIterator[str]:
    """URL of a fresh, migrated database, dropped after the test."""
    name = await _fresh_database(pg_template)
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
