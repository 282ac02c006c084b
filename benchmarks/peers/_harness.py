"""The one shape every module in ``benchmarks/peers/`` has: a command line, a workload, a JSON result.

A peer module (one file per system) defines what its system needs and calls
:func:`main`::

    VARIANTS = {"default": {...}, "best": {...}}      # settings of each configuration

    def run(config: PeerConfig, settings: dict) -> Timings:
        ...   # set up, enqueue config.n in batches of config.batch_size, drain with ONE worker, tear down

    if __name__ == "__main__":
        main("system", version_of("package"), VARIANTS, run)

:func:`main` parses ``--n``, ``--batch-size``, ``--variant``, ``--pg-dsn``,
``--redis-url``, ``--output-json`` and ``--timeout``, runs the workload once and
writes one :class:`PeerResult` as JSON (to stdout when ``--output-json`` is not
given). ``benchmarks/compare.py`` starts each module as a subprocess, so every
system has its own interpreter, event loop and worker process.

The workload is the same for every system: ``n`` no-op jobs enqueued in batches
(timed as enqueue/s), then drained by one worker in this process, timed from
the worker's start until every job ran **and** the worker has stopped (so
buffered acknowledgements are flushed) as drain/s. Each run works in a
database, Redis database or key namespace of its own (given by compare.py)
and removes what it created.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import platform
import sys
import time
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import click
import msgspec

__all__ = [
    "Countdown",
    "PeerConfig",
    "PeerResult",
    "Timings",
    "main",
    "run_async",
    "version_of",
]

T = TypeVar("T")


class PeerConfig(msgspec.Struct, kw_only=True, frozen=True):
    """What one run measures.

    Attributes
    ----------
    n : int
        Jobs enqueued and drained.
    batch_size : int
        Jobs per enqueue call (the system's batch enqueue where it has one).
    variant : str
        Key of the module's ``VARIANTS``.
    pg_dsn : str or None
        A PostgreSQL database this run may use alone (``postgresql://...``).
    redis_url : str or None
        A Redis database this run may use alone (``redis://host:port/db``).
    timeout : float
        Longest the drain may take, seconds.
    """

    n: int
    batch_size: int
    variant: str
    pg_dsn: str | None
    redis_url: str | None
    timeout: float


class Timings(NamedTuple):
    """What a module's ``run`` returns: the two phases in **seconds**, and notes on the configuration."""

    enqueue_seconds: float
    drain_seconds: float
    notes: dict[str, Any]


class PeerResult(msgspec.Struct, kw_only=True, frozen=True):
    """One run of one system in one configuration.

    Attributes
    ----------
    system, variant, version : str
        The system's name, the configuration (``default``, ``best``, ...) and the package version.
    n, batch_size : int
        As configured.
    enqueue_seconds, drain_seconds : float
        Wall time of each phase, seconds.
    enqueue_per_s, drain_per_s : float
        Jobs per second of each phase.
    settings : dict
        The variant's settings as given to the system.
    notes : dict
        Anything the module reports about how it ran (worker class, counts checked, ...).
    python, started_at : str
        Interpreter version; UTC start, ISO 8601.
    """

    system: str
    variant: str
    version: str
    n: int
    batch_size: int
    enqueue_seconds: float
    enqueue_per_s: float
    drain_seconds: float
    drain_per_s: float
    settings: dict[str, Any]
    notes: dict[str, Any]
    python: str
    started_at: str


def version_of(distribution: str) -> str:
    """Installed version of ``distribution``, or ``"?"``."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop (the loop runnerq-fast's harness uses), as every asyncio peer is run."""
    import uvloop

    return uvloop.run(coro)


class Countdown:
    """Counts finished jobs from handlers (any thread) and tells when all ``n`` ran.

    Parameters
    ----------
    n : int
        Jobs to wait for.
    """

    def __init__(self, n: int) -> None:
        import threading

        self.n = n
        self.count = 0
        self._lock = threading.Lock()
        self.done = threading.Event()

    def tick(self) -> None:
        """One job ran (thread-safe)."""
        with self._lock:
            self.count += 1
            if self.count >= self.n:
                self.done.set()

    async def wait(self, timeout: float) -> None:
        """Wait (polling every 2 ms, from the event loop) until ``n`` jobs ran.

        Raises
        ------
        TimeoutError
            If they did not within ``timeout`` seconds.
        """
        deadline = time.perf_counter() + timeout
        while not self.done.is_set():
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{self.count}/{self.n} jobs ran in {timeout} s")
            await asyncio.sleep(0.002)

    def wait_blocking(self, timeout: float) -> None:
        """Like :meth:`wait`, for a thread that may block."""
        if not self.done.wait(timeout):
            raise TimeoutError(f"{self.count}/{self.n} jobs ran in {timeout} s")


def main(system: str, version: str, variants: Mapping[str, dict[str, Any]],
         run: Callable[[PeerConfig, dict[str, Any]], Timings]) -> None:
    """Command line of a peer module: run the workload once and write a :class:`PeerResult`."""

    @click.command()
    @click.option("--n", "n", type=click.IntRange(min=1), default=20_000, show_default=True, help="Jobs.")
    @click.option("--batch-size", type=click.IntRange(min=1), default=500, show_default=True,
                  help="Jobs per enqueue call.")
    @click.option("--variant", type=click.Choice(sorted(variants)), default="default", show_default=True)
    @click.option("--pg-dsn", help="PostgreSQL database of this run (postgresql://...).")
    @click.option("--redis-url", help="Redis database of this run (redis://host:port/db).")
    @click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True,
                  help="Longest the drain may take, seconds.")
    @click.option("--output-json", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE")
    def command(n: int, batch_size: int, variant: str, pg_dsn: str | None, redis_url: str | None,
                timeout: float, output_json: Path | None) -> None:
        config = PeerConfig(n=n, batch_size=batch_size, variant=variant, pg_dsn=pg_dsn, redis_url=redis_url,
                            timeout=timeout)
        settings = dict(variants[variant])
        started_at = datetime.now(UTC).isoformat(timespec="seconds")
        timings = run(config, settings)
        result = PeerResult(
            system=system, variant=variant, version=version, n=n, batch_size=batch_size,
            enqueue_seconds=round(timings.enqueue_seconds, 6),
            enqueue_per_s=round(n / timings.enqueue_seconds, 1),
            drain_seconds=round(timings.drain_seconds, 6),
            drain_per_s=round(n / timings.drain_seconds, 1),
            settings=settings, notes=timings.notes, python=platform.python_version(), started_at=started_at,
        )
        data = msgspec.json.encode(result) + b"\n"
        if output_json is None:
            sys.stdout.buffer.write(data)
        else:
            output_json.write_bytes(data)

    command()
