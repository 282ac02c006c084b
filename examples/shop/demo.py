"""Run the shop pipeline end to end in one process (no services needed).

::

    python -m examples.shop.demo                 # memory:// backend
    python -m examples.shop.demo --backend postgresql://postgres@127.0.0.1:5432/test --orders 20

Starts the shop engine, places ``--orders`` orders, waits until every
activity of every order has finished and prints the queue's counts.
Exit code 0 only if all ``orders x 8`` activities completed.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import click
import msgspec
from rich.console import Console
from rich.table import Table

import runnerq_fast as rq
from examples.shop.app import ACTIVITIES_PER_ORDER, engine, sample_order

_UNFINISHED = ("pending", "scheduled", "processing", "retrying")


async def run_demo(backend_url: str, orders: int, timeout: float) -> rq.QueueStats:
    """Run the engine in process, place ``orders`` orders and wait for all of them.

    Parameters
    ----------
    backend_url : str
        Backend to use; the engine and the enqueuer share one connection.
    orders : int
        Orders to place.
    timeout : float
        Seconds to wait for every activity to finish.

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
    engine.use_backend(backend)
    # a queue of its own, so leftovers of other runs on a shared database do not count
    engine.config = msgspec.structs.replace(engine.config, queue_name=f"shop-demo-{uuid.uuid4().hex[:8]}")
    try:
        async with engine:
            ids = [f"demo-{uuid.uuid4().hex[:8]}" for _ in range(orders)]
            await engine.executor.enqueue_many([
                engine.executor.activity("place_order").payload(sample_order(i, review_delay_s=0.5))
                for i in ids
            ])
            inspector = engine.inspector()
            expected = orders * ACTIVITIES_PER_ORDER
            deadline = time.monotonic() + timeout
            while True:
                stats = await inspector.stats()
                unfinished = sum(getattr(stats, s) for s in _UNFINISHED)
                if stats.total >= expected and not unfinished:
                    return stats
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{unfinished} activities unfinished after {timeout} s: {stats}")
                await asyncio.sleep(0.05)
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
def main(backend_url: str, orders: int, timeout: float) -> None:
    """Run the shop pipeline end to end in this process."""
    started = time.perf_counter()
    stats = asyncio.run(run_demo(backend_url, orders, timeout))
    Console().print(summary_table(stats, orders, time.perf_counter() - started))
    if not succeeded(stats, orders):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
