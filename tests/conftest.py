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
from typing import Any

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


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Run in one process (``-n 0``) when the marker expression may select ``slow`` or ``bench`` tests.

    The default run (addopts: ``-n 2``, ``-m "not slow and not bench"``) spreads its tests over two
    pytest-xdist workers; soak, fault and benchmark runs measure time and load, so they keep the machine to
    themselves, and so do ``--pdb`` and ``-s`` (no worker has a terminal). Called before pytest-xdist's own
    ``pytest_cmdline_main`` (a conftest registers later, so its ``tryfirst`` hook runs first), which turns
    ``numprocesses`` into workers.
    """
    markexpr = config.getoption("markexpr", "") or ""
    serial = "not slow" not in markexpr or "not bench" not in markexpr
    serial = serial or config.getoption("usepdb", False) or config.getoption("capture", "fd") == "no"
    if serial and getattr(config.option, "numprocesses", None) is not None:  # None: pytest-xdist not installed
        config.option.numprocesses = 0


_TERMINAL_ENV = ("COLUMNS", "LINES")
"""What a pytest-xdist worker's environment has that its controller's may not: readline, loaded in the
worker, exports the terminal size (80 x 24) when it starts, so a CLI subprocess would print 80 columns wide to
a pipe where it prints its own width (``tests/acceptance/test_cli_basic.py``, piped tables)."""


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist (controller): hand each worker the controller's ``COLUMNS`` and ``LINES`` (or their absence)."""
    node.workerinput["runnerq_terminal_env"] = {k: os.environ.get(k) for k in _TERMINAL_ENV}


def pytest_configure(config: pytest.Config) -> None:
    """In a pytest-xdist worker, give ``COLUMNS`` and ``LINES`` back the controller's values."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return
    for key, value in workerinput.get("runnerq_terminal_env", {}).items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    wanted = os.environ.get("RUNNERQ_TEST_LOOPS", "uvloop,asyncio").split(",")
    if item.get_closest_marker("one_loop") is not None:
        wanted = wanted[:1]
    return {name: _LOOPS[name] for name in wanted}
