"""The Redis backend on a Redis Cluster against the conformance suite (a fresh key namespace per test).

The cluster is the session's (``tests/redis_cluster_fixtures.py``): three masters, each with a replica.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from runnerq_fast.backends.redis import RedisBackend
from runnerq_fast.backends.redis.cluster import RedisClusterBackend
from tests.conformance import BackendConformance, ErrorTextConformance, HardeningConformance
from tests.conformance_integrity import IntegrityConformance
from tests.conformance_leases import LeaseConformance
from tests.conformance_ops import OperationsConformance
from tests.conformance_registry import RegistryConformance
from tests.conformance_retention import RetentionConformance
from tests.integration.test_redis_conformance import PAYLOAD_DAMAGES, ROW_DAMAGES, _damage

# One event loop: the same suite runs on both loops against one Redis server (test_redis_conformance.py),
# and the cluster adds routing, not loop behaviour; both loops doubled the default run by 2 minutes.
pytestmark = pytest.mark.one_loop


class TestRedisClusterConformance(
    BackendConformance, ErrorTextConformance, HardeningConformance, OperationsConformance, RegistryConformance,
    IntegrityConformance,
    RetentionConformance,
    LeaseConformance,
):
    @pytest.fixture
    async def backend(self, redis_cluster_backend: RedisClusterBackend) -> AsyncIterator[RedisBackend]:
        yield redis_cluster_backend

    @pytest.fixture
    async def short_results(self, redis_cluster_url: str, redis_cluster_namespace: str) -> AsyncIterator[RedisBackend]:
        b = await RedisClusterBackend.open(redis_cluster_url, namespace=redis_cluster_namespace, result_ttl=0.2)
        yield b
        await b.close()

    @pytest.fixture(params=sorted(ROW_DAMAGES))
    def corrupt_row(self, backend: RedisBackend, redis_cluster_namespace: str,
                    request: pytest.FixtureRequest) -> Callable[[str, str], Awaitable[None]]:
        return _damage(backend, redis_cluster_namespace, *ROW_DAMAGES[request.param])

    @pytest.fixture(params=sorted(PAYLOAD_DAMAGES))
    def corrupt_payload(self, backend: RedisBackend, redis_cluster_namespace: str,
                        request: pytest.FixtureRequest) -> Callable[[str, str], Awaitable[None]]:
        return _damage(backend, redis_cluster_namespace, *PAYLOAD_DAMAGES[request.param])

