"""The memory backend against the conformance suite."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from runnerq_fast.backends.memory import MemoryBackend
from tests.conformance import BackendConformance, ErrorTextConformance, HardeningConformance
from tests.conformance_ops import OperationsConformance
from tests.conformance_registry import RegistryConformance
from tests.conformance_retention import RetentionConformance


class TestMemoryConformance(
    BackendConformance, ErrorTextConformance, HardeningConformance, OperationsConformance, RegistryConformance,
    RetentionConformance,
):
    @pytest.fixture
    async def backend(self) -> AsyncIterator[MemoryBackend]:
        b = MemoryBackend()
        yield b
        await b.close()
