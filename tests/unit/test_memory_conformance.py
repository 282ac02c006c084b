"""The memory backend against the conformance suite."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from runnerq_fast.backends.memory import MemoryBackend
from tests.conformance import BackendConformance, ErrorTextConformance, HardeningConformance
from tests.conformance_integrity import IntegrityConformance
from tests.conformance_leases import LeaseConformance
from tests.conformance_ops import OperationsConformance
from tests.conformance_progress import ProgressConformance
from tests.conformance_registry import RegistryConformance
from tests.conformance_retention import RetentionConformance


class TestMemoryConformance(
    BackendConformance, ErrorTextConformance, HardeningConformance, OperationsConformance, RegistryConformance,
    IntegrityConformance,
    RetentionConformance,
    LeaseConformance,
    ProgressConformance,
):
    @pytest.fixture
    async def backend(self) -> AsyncIterator[MemoryBackend]:
        b = MemoryBackend()
        yield b
        await b.close()

    @pytest.fixture
    def short_results(self, backend: MemoryBackend) -> MemoryBackend:
        return backend  # keeps results until deleted

    @pytest.fixture
    def corrupt_row(self) -> Callable[[str, str], Awaitable[None]]:
        pytest.skip("the memory backend stores typed Python objects: no stored bytes to damage")

    @pytest.fixture
    def corrupt_payload(self) -> Callable[[str, str], Awaitable[None]]:
        pytest.skip("the memory backend stores typed Python objects: no stored bytes to damage")
