"""The shop example run in process on memory:// (no service, no subprocess).

The pipeline chains forward (no handler waits for another activity), so it
must complete with a single worker slot; these tests guard against the
example ever teaching the "await a child inside a handler" deadlock again.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest

import runnerq_fast as rq
from examples.shop.app import ACTIVITIES_PER_ORDER, engine, sample_order
from examples.shop.demo import run_demo, running_shop, succeeded, wait_until_settled


@pytest.mark.parametrize("concurrency", [1, 2])
def test_orders_complete_with_fewer_worker_slots_than_orders(concurrency: int) -> None:
    saved = engine.config
    started = time.monotonic()
    stats = asyncio.run(run_demo("memory://", 5, 20.0, concurrency=concurrency))
    elapsed = time.monotonic() - started
    assert succeeded(stats, 5), stats
    assert stats.total == stats.completed == 5 * ACTIVITIES_PER_ORDER, stats
    assert elapsed < 20.0
    assert engine.config == saved  # the module's engine is left as it was


async def _place(payload: dict[str, Any], concurrency: int = 1) -> tuple[rq.QueueStats, list[rq.ActivitySnapshot]]:
    backend = rq.MemoryBackend()
    try:
        async with running_shop(backend, "shop-test", concurrency=concurrency) as shop:
            await shop.executor.activity("place_order").payload(payload).execute()
            inspector = shop.inspector()
            stats = await wait_until_settled(inspector, 1, 15.0)
            return stats, await inspector.list_activities(limit=100)
    finally:
        await backend.close()


def test_one_order_is_a_forward_chain_with_one_child_per_step() -> None:
    stats, rows = asyncio.run(_place(sample_order("ord-1", review_delay_s=0.1)))
    assert stats.completed == stats.total == ACTIVITIES_PER_ORDER, stats
    assert Counter(r.activity_type for r in rows) == {
        "place_order": 1, "reserve_stock": 1, "fraud_check": 1, "charge_payment": 1,
        "ship_order": 1, "send_email": 2, "request_review": 1,
    }
    # the two deterministic transient failures were retried once; the retried
    # parents did not create a second child (one row per idempotency key)
    retries = {r.activity_type: r.retry_count for r in rows if r.retry_count}
    assert retries == {"reserve_stock": 1, "charge_payment": 1}
    keys = sorted(r.idempotency_key or "" for r in rows if r.activity_type != "place_order")
    assert keys == sorted(f"ord-1:{s}" for s in ("reserve", "fraud", "charge", "ship", "receipt", "review",
                                                 "review-mail"))
    review = next(r for r in rows if r.activity_type == "request_review")
    assert review.ready_at_ms >= review.created_at_ms + 100  # the delayed step


def test_an_order_without_items_fails_at_once_and_goes_no_further() -> None:
    stats, rows = asyncio.run(_place({**sample_order("ord-empty"), "items": []}))
    assert stats.total == stats.failed == 1, stats
    (row,) = rows
    assert row.retry_count == 0
    assert "NonRetryableError" in (row.last_error or "") and "no items" in (row.last_error or "")


def test_a_suspicious_order_stops_at_the_fraud_check() -> None:
    order = sample_order("ord-big")
    order["items"] = [{"sku": "TV-85", "qty": 1, "price_cents": 250_000}]
    stats, rows = asyncio.run(_place(order))
    assert stats.total == 3 and stats.completed == 2 and stats.failed == 1, stats
    (fraud,) = [r for r in rows if r.status == "failed"]
    assert fraud.activity_type == "fraud_check" and fraud.retry_count == 0
    assert "rejected by fraud check" in (fraud.last_error or "")
