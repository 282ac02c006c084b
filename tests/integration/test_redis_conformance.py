"""The Redis backend against the conformance suite (a fresh key namespace per test)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from runnerq_fast.backends.redis import RedisBackend, keys
from tests.conformance import BackendConformance, ErrorTextConformance, HardeningConformance
from tests.conformance_integrity import IntegrityConformance
from tests.conformance_leases import LeaseConformance
from tests.conformance_ops import OperationsConformance
from tests.conformance_progress import ProgressConformance
from tests.conformance_registry import RegistryConformance
from tests.conformance_retention import RetentionConformance
from tests.redis_fixtures import damage

# hash field (or part of the numbers field n, tests.redis_fixtures.NUMBER_PARTS) := value that does not decode
ROW_DAMAGES = {"priority": ("pr", b"high"), "retry_count": ("rc", b"x"), "max_retries": ("mr", b"1.5"),
               "timeout": ("to", b""), "ready": ("r", b"\xff"), "created": ("c", b"1e3")}
PAYLOAD_DAMAGES = {"not-json": ("p", b"{not json"), "not-utf8": ("p", b"\xff\x00")}


class TestRedisConformance(
    BackendConformance, ErrorTextConformance, HardeningConformance, OperationsConformance, RegistryConformance,
    IntegrityConformance,
    RetentionConformance,
    LeaseConformance,
    ProgressConformance,
):
    @pytest.fixture
    async def backend(self, redis_backend: RedisBackend) -> AsyncIterator[RedisBackend]:
        yield redis_backend

    @pytest.fixture
    async def short_results(self, redis_url: str, redis_namespace: str) -> AsyncIterator[RedisBackend]:
        b = await RedisBackend.open(redis_url, namespace=redis_namespace, result_ttl=0.2)
        yield b
        await b.close()

    @pytest.fixture(params=sorted(ROW_DAMAGES))
    def corrupt_row(self, backend: RedisBackend, redis_namespace: str,
                    request: pytest.FixtureRequest) -> Callable[[str, str], Awaitable[None]]:
        return _damage(backend, redis_namespace, *ROW_DAMAGES[request.param])

    @pytest.fixture(params=sorted(PAYLOAD_DAMAGES))
    def corrupt_payload(self, backend: RedisBackend, redis_namespace: str,
                        request: pytest.FixtureRequest) -> Callable[[str, str], Awaitable[None]]:
        return _damage(backend, redis_namespace, *PAYLOAD_DAMAGES[request.param])


def _damage(backend: RedisBackend, namespace: str, field: str, value: bytes) -> Callable[[str, str], Awaitable[None]]:
    async def corrupt(queue: str, activity_id: str) -> None:
        await damage(backend.client, keys.activity(namespace, queue, activity_id), field, value)

    return corrupt
