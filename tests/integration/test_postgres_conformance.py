"""The PostgreSQL backend against the conformance suite (a fresh database per test)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from runnerq_fast.backends.postgres import PostgresBackend
from tests.conformance import BackendConformance, ErrorTextConformance, HardeningConformance
from tests.conformance_ops import OperationsConformance
from tests.conformance_registry import RegistryConformance
from tests.conformance_retention import RetentionConformance


class TestPostgresConformance(
    BackendConformance, ErrorTextConformance, HardeningConformance, OperationsConformance, RegistryConformance,
    RetentionConformance,
):
    @pytest.fixture
    async def backend(self, pg_url: str) -> AsyncIterator[PostgresBackend]:
        b = await PostgresBackend.open(pg_url, min_size=2, max_size=12)
        yield b
        await b.close()
