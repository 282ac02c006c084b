"""Run the shop pipeline end to end in one process (no services needed).

::

    python -m examples.shop.demo                 # memory:// backend
    python -m examples.shop.demo --backend postgresql://postgres@127.0.0.1:5432/test --orders 20
    python -m examples.shop.demo --orders 20 --concurrency 1   # any number of worker slots >= 1 works

Starts the shop engine, places ``--orders`` orders, waits until the queue has
settled (no activity pending, scheduled, running or retrying: since every step
enqueues the next one before it finishes, nothing more can appear) and prints
the queue's counts. Exit code 0 only if all ``orders x 8`` activities completed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator

import click
from rich.console import Console
from rich.table import Table

import runnerq_fast as rq
from examples.shop.app import ACTIVITIES_PER_ORDER, engine, sample_order

_UNFINISHED = ("pending", "scheduled", "processing", "retrying")


@contextlib.asynccontextmanager
async def running_shop(
    backend: rq.Backend, queue_name: str, *, concurrency: int | None = None
) -> AsyncIterator[rq.WorkerEngine]:
    """Run the shop engine on ``backend`` and ``queue_name`` for the ``async with`` block.

    The engine's queue name and worker count are restored afterwards.

    Parameters
    ----------
    backend : Backend
        An opened backend (not closed here).
    queue_name : str
        Queue to serve and enqueue to.
    concurrency : int, optional
        Worker slots (``max_workers``); default: the engine's setting.
    """
    saved = engine.config
    engine.use_backend(backend)
    engine.configure(queue_name=queue_name, max_workers=concurrency or saved.max_workers)
    try:
        async with engine:
            yield engine
    finally:
        engine.configure(queue_name=saved.queue_name, max_workers=saved.max_workers)


async def wait_until_settled(inspector: rq.QueueInspector, at_least: int, timeout: float) -> rq.QueueStats:
    """Wait until the queue holds ``at_least`` activities and none is unfinished.

    Each step enqueues the next before it finishes, so once nothing is
    pending, scheduled, running or retrying no further activity can appear:
    the orders are done, whether they all succeeded or some failed.

    Raises
    ------
    TimeoutError
        If activities are still unfinished after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        stats = await inspector.stats()
        unfinished = sum(getattr(stats, s) for s in _UNFINISHED)
        if stats.total >= at_least and not unfinished:
            return stats
        if time.monotonic() > deadline:
            raise TimeoutError(f"{unfinished} activities unfinished after {timeout} s: {stats}")
        await asyncio.sleep(0.05)


async def run_demo(backend_url: str, orders: int, timeout: float, *, concurrency: int | None = None) -> rq.QueueStats:
    """Run the engine in process, place ``orders`` orders and wait for all of them.

    Parameters
    ----------
    backend_url : str
        Backend to use; the engine and the enqueuer share one connection.
    orders : int
        Orders to place.
    timeout : float
        Seconds to wait for the queue to settle.
    concurrency : int, optional
        Worker slots; any value >= 1 completes (no step waits for another).

    Returns
    -------
    QueueStats
        The counts of the run's own queue (``shop-demo-<random>``) at the end.

    Raises
    ------
    TimeoutError
        If activities are still unfinished after ``timeout`` seconds.
    """
    backend = await rq.connect(backend_url)
    # a queue of its own, so leftovers of other runs on a shared database do not count
    queue_name = f"shop-demo-{uuid.uuid4().hex[:8]}"
    try:
        async with running_shop(backend, queue_name, concurrency=concurrency) as shop:
            ids = [f"demo-{uuid.uuid4().hex[:8]}" for _ in range(orders)]
            await shop.executor.enqueue_many([
                shop.executor.activity("place_order").payload(sample_order(i, review_delay_s=0.5))
                for i in ids
            ])
            return await wait_until_settled(shop.inspector(), orders, timeout)
    finally:
        await backend.close()


def summary_table(stats: rq.QueueStats, orders: int, seconds: float) -> Table:
    """A rich table of the final counts of a demo run that took ``seconds``."""
    table = Table(title=f"shop: {orders} orders x {ACTIVITIES_PER_ORDER} activities, {seconds:.2f} s")
    table.add_column("status")
    table.add_column("count", justify="right")
    for name in ("completed", "failed", "dead_letter", "cancelled"):
        table.add_row(name, str(getattr(stats, name)))
    return table


def succeeded(stats: rq.QueueStats, orders: int) -> bool:
    """Whether every activity of every order completed."""
    return stats.completed == orders * ACTIVITIES_PER_ORDER


@click.command()
@click.option("--backend", "backend_url", default="memory://", show_default=True, metavar="URL")
@click.option("--orders", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--timeout", type=float, default=30.0, show_default=True, metavar="SECONDS")
@click.option("--concurrency", type=click.IntRange(min=1), metavar="N",
              help="Worker slots (any N >= 1 works); default: the engine's setting.")
def main(backend_url: str, orders: int, timeout: float, concurrency: int | None) -> None:
    """Run the shop pipeline end to end in this process."""
    started = time.perf_counter()
    stats = asyncio.run(run_demo(backend_url, orders, timeout, concurrency=concurrency))
    Console().print(summary_table(stats, orders, time.perf_counter() - started))
    if not succeeded(stats, orders):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
