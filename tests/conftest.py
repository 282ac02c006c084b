"""Shared fixtures: every async test runs on uvloop and on the stock asyncio loop.

Like uvloop's own test mixin, each test is parametrized over both loops
(``RUNNERQ_TEST_LOOPS=uvloop`` or ``=asyncio`` narrows it to one). A test
marked ``one_loop`` runs on the first loop wanted only: for suites whose
loop-dependence another suite already covers on both loops.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping

import pytest
import uvloop
from hypothesis import settings

# Property tests check results, never time: Hypothesis's per-example deadline (200 ms) only measures
# how loaded the machine is (a 1.5 MiB codec example took 290 ms on 2 busy cores).
settings.register_profile("runnerq", deadline=None)
settings.load_profile("runnerq")

# PostgreSQL fixtures (fresh database per test) shared by tests/integration and tests/faults.
pytest_plugins = ["tests.pg_fixtures", "tests.redis_fixtures", "tests.redis_cluster_fixtures"]

_LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "uvloop": uvloop.new_event_loop,
    "asyncio": asyncio.new_event_loop,
}


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    wanted = os.environ.get("RUNNERQ_TEST_LOOPS", "uvloop,asyncio").split(",")
    if item.get_closest_marker("one_loop") is not None:
        wanted = wanted[:1]
    return {name: _LOOPS[name] for name in wanted}
