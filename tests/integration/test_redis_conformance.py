"""The Redis backend against the conformance suite (a fresh key namespace per test)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from runnerq_fast.backends.redis import RedisBackend
from tests.conformance import BackendConformance, ErrorTextConformance, HardeningConformance
from tests.conformance_ops import OperationsConformance
from tests.conformance_registry import RegistryConformance
from tests.conformance_retention import RetentionConformance


class TestRedisConformance(
    BackendConformance, ErrorTextConformance, HardeningConformance, OperationsConformance, RegistryConformance,
    RetentionConformance,
):
    @pytest.fixture
    async def backend(self, redis_backend: RedisBackend) -> AsyncIterator[RedisBackend]:
        yield redis_backend
