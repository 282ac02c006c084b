"""The SQLite backend against the conformance suite (a fresh file per test)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from runnerq_fast.backends.sqlite import SqliteBackend
from tests.conformance import BackendConformance, ErrorTextConformance, HardeningConformance
from tests.conformance_integrity import IntegrityConformance
from tests.conformance_leases import LeaseConformance
from tests.conformance_ops import OperationsConformance
from tests.conformance_progress import ProgressConformance
from tests.conformance_registry import RegistryConformance
from tests.conformance_retention import RetentionConformance

# column := value that does not decode as the column's type (SQLite stores any value in any column)
ROW_DAMAGES = {"priority": "'high'", "retry_count": "'x'", "max_retries": "'x'", "timeout_ms": "1.5",
               "created_at": "created_at + 0.5", "ready_at": "X'ff'"}
PAYLOAD_DAMAGES = {"payload": "'{not json'", "blob": "X'ff00'"}



def _damage(path: Path, column: str, value: str) -> Callable[[str, str], Awaitable[None]]:
    async def corrupt(queue: str, activity_id: str) -> None:
        conn = sqlite3.connect(path)
        try:
            conn.execute(f"UPDATE runnerq_activities SET {column} = {value} WHERE id = ?", (activity_id,))
            conn.commit()
        finally:
            conn.close()

    return corrupt


class TestSqliteConformance(
    BackendConformance, ErrorTextConformance, HardeningConformance, OperationsConformance, RegistryConformance,
    IntegrityConformance,
    RetentionConformance,
    LeaseConformance,
    ProgressConformance,
):
    @pytest.fixture
    async def backend(self, tmp_path: Path) -> AsyncIterator[SqliteBackend]:
        b = await SqliteBackend.open(f"sqlite:///{tmp_path / 'conformance.db'}")
        yield b
        await b.close()

    @pytest.fixture
    def short_results(self, backend: SqliteBackend) -> SqliteBackend:
        return backend  # keeps results until retention prunes them

    @pytest.fixture(params=sorted(ROW_DAMAGES))
    def corrupt_row(self, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[str, str], Awaitable[None]]:
        return _damage(tmp_path / "conformance.db", request.param, ROW_DAMAGES[request.param])

    @pytest.fixture(params=sorted(PAYLOAD_DAMAGES))
    def corrupt_payload(self, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[str, str], Awaitable[None]]:
        return _damage(tmp_path / "conformance.db", "payload", PAYLOAD_DAMAGES[request.param])
