"""The SQLite backend against the conformance suite (a fresh file per test)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runnerq_fast.backends.sqlite import SqliteBackend
from tests.conformance import BackendConformance, ErrorTextConformance, HardeningConformance
from tests.conformance_ops import OperationsConformance
from tests.conformance_registry import RegistryConformance
from tests.conformance_retention import RetentionConformance


class TestSqliteConformance(
    BackendConformance, ErrorTextConformance, HardeningConformance, OperationsConformance, RegistryConformance,
    RetentionConformance,
):
    @pytest.fixture
    async def backend(self, tmp_path: Path) -> AsyncIterator[SqliteBackend]:
        b = await SqliteBackend.open(f"sqlite:///{tmp_path / 'conformance.db'}")
        yield b
        await b.close()
