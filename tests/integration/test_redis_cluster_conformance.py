"""The Redis backend on a Redis Cluster against the conformance suite (a fresh key namespace per test).

The cluster is the session's (``tests/redis_cluster_fixtures.py``): three masters, each with a replica.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from runnerq_fast.backends.redis import RedisBackend
from runnerq_fast.backends.redis.cluster import RedisClusterBackend
from tests.integration import test_redis_conformance as one_server  # a module name: pytest collects no class twice

# One event loop: the same suite runs on both loops against one Redis server (test_redis_conformance.py),
# and the cluster adds routing, not loop behaviour; both loops doubled the default run by 2 minutes.
pytestmark = pytest.mark.one_loop


class TestRedisClusterConformance(one_server.TestRedisConformance):
    """The one-server suite and its damage fixtures, on the cluster's backend and key namespace."""

    @pytest.fixture
    def redis_namespace(self, redis_cluster_namespace: str) -> str:
        return redis_cluster_namespace

    @pytest.fixture
    async def backend(self, redis_cluster_backend: RedisClusterBackend) -> AsyncIterator[RedisBackend]:
        yield redis_cluster_backend

    @pytest.fixture
    async def short_results(self, redis_cluster_url: str, redis_cluster_namespace: str) -> AsyncIterator[RedisBackend]:
        b = await RedisClusterBackend.open(redis_cluster_url, namespace=redis_cluster_namespace, result_ttl=0.2)
        yield b
        await b.close()
