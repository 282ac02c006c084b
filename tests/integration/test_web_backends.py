"""The web conformance (tests/web_conformance.py, tests/web_dashboard_conformance.py) on SQLite, PostgreSQL, Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runnerq_fast.backends.postgres import PostgresBackend
from runnerq_fast.backends.redis import RedisBackend
from runnerq_fast.backends.sqlite import SqliteBackend
from tests.web_conformance import StreamConformance, WebConformance
from tests.web_dashboard_conformance import DashboardWebConformance


class TestSqliteWeb(WebConformance, DashboardWebConformance, StreamConformance):
    @pytest.fixture
    async def backend(self, tmp_path: Path) -> AsyncIterator[SqliteBackend]:
        b = await SqliteBackend.open(f"sqlite:///{tmp_path / 'web.db'}")
        yield b
        await b.close()


class TestPostgresWeb(WebConformance, DashboardWebConformance, StreamConformance):
    @pytest.fixture
    async def backend(self, pg_backend: PostgresBackend) -> AsyncIterator[PostgresBackend]:
        yield pg_backend


class TestRedisWeb(WebConformance, DashboardWebConformance, StreamConformance):
    @pytest.fixture
    async def backend(self, redis_backend: RedisBackend) -> AsyncIterator[RedisBackend]:
        yield redis_backend
