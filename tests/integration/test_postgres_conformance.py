"""The PostgreSQL backend against the conformance suite (a fresh database per test)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from runnerq_fast.backends.postgres import PostgresBackend
from tests.conformance import BackendConformance, ErrorTextConformance, HardeningConformance
from tests.conformance_integrity import IntegrityConformance
from tests.conformance_leases import LeaseConformance
from tests.conformance_ops import OperationsConformance
from tests.conformance_progress import ProgressConformance
from tests.conformance_registry import RegistryConformance
from tests.conformance_retention import RetentionConformance

# payload := text that is not the JSON the engine stored (columns are typed: nothing else can be damaged)
PAYLOAD_DAMAGES = {"not-json": "{not json", "truncated": '{"i": 3', "empty": ""}


class TestPostgresConformance(
    BackendConformance, ErrorTextConformance, HardeningConformance, OperationsConformance, RegistryConformance,
    IntegrityConformance,
    RetentionConformance,
    LeaseConformance,
    ProgressConformance,
):
    @pytest.fixture
    async def backend(self, pg_url: str) -> AsyncIterator[PostgresBackend]:
        b = await PostgresBackend.open(pg_url, min_size=2, max_size=12)
        yield b
        await b.close()

    @pytest.fixture
    def short_results(self, backend: PostgresBackend) -> PostgresBackend:
        return backend  # keeps results until retention prunes them

    @pytest.fixture
    def corrupt_row(self) -> Callable[[str, str], Awaitable[None]]:
        pytest.skip("PostgreSQL's columns are typed (smallint, integer, timestamptz, a status CHECK): "
                    "every stored row decodes; only the payload text can be damaged (corrupt_payload)")

    @pytest.fixture(params=sorted(PAYLOAD_DAMAGES))
    def corrupt_payload(self, backend: PostgresBackend,
                        request: pytest.FixtureRequest) -> Callable[[str, str], Awaitable[None]]:
        async def corrupt(queue: str, activity_id: str) -> None:
            await backend.pool.execute("UPDATE runnerq_activities SET payload = $1 WHERE id = $2::uuid",
                                       PAYLOAD_DAMAGES[request.param], activity_id)

        return corrupt
