"""Place sample orders on the shop queue from a separate process.

::

    python -m examples.shop.enqueue_orders --backend postgresql://postgres@127.0.0.1:5432/test -n 5 --wait 30

Prints one ``order_id activity_id`` line per order; with ``--wait`` it then
waits for every ``place_order`` activity and prints its result. The rest of
each order's chain runs on in the worker (watch it with
``runnerq-fast stats --queue shop``).
"""

from __future__ import annotations

import asyncio
import uuid

import click
import msgspec

import runnerq_fast as rq
from examples.shop.app import QUEUE, sample_order


async def place_orders(backend_url: str, count: int, review_delay_s: float, wait: float | None) -> list[str]:
    """Enqueue ``count`` sample orders; return their ``place_order`` activity ids.

    Parameters
    ----------
    backend_url : str
        Where the shop queue lives.
    count : int
        Orders to place.
    review_delay_s : float
        Seconds between shipping and the review request, per order.
    wait : float or None
        Seconds to wait for each ``place_order`` result; ``None`` does not wait.
    """
    backend = await rq.connect(backend_url)
    try:
        executor = rq.ActivityExecutor(backend, QUEUE)
        order_ids = [f"ord-{uuid.uuid4().hex[:8]}" for _ in range(count)]
        futures = await executor.enqueue_many_futures([
            executor.activity("place_order")
            .payload(sample_order(order_id, review_delay_s=review_delay_s))
            .idempotency_key(order_id)
            for order_id in order_ids
        ])
        for order_id, f in zip(order_ids, futures, strict=True):
            click.echo(f"{order_id} {f.activity_id}")
        if wait is not None:
            results = await asyncio.gather(*(f.result(timeout=wait) for f in futures))
            for r in results:
                click.echo(msgspec.json.encode(r).decode())
        return [f.activity_id for f in futures]
    finally:
        await backend.close()


@click.command()
@click.option("--backend", "backend_url", envvar="RUNNERQ_BACKEND", required=True, metavar="URL",
              help="Backend URL (or RUNNERQ_BACKEND).")
@click.option("-n", "count", type=click.IntRange(min=1), default=1, show_default=True, help="Orders to place.")
@click.option("--review-delay", type=click.FloatRange(min=0), default=5.0, show_default=True, metavar="SECONDS",
              help="Delay of the review request after shipping.")
@click.option("--wait", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Wait for each place_order result.")
def main(backend_url: str, count: int, review_delay: float, wait: float | None) -> None:
    """Place sample orders on the shop queue."""
    asyncio.run(place_orders(backend_url, count, review_delay, wait))


if __name__ == "__main__":
    main()
