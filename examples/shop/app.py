"""An order pipeline: eight activities per order, chained through child activities.

::

    place_order ──▶ reserve_stock ──▶ charge_payment ──▶ ship_order ──▶ send_email (receipt)
                   (fails once,        │  awaits                 └──▶ request_review (delayed)
                    retried 0.2 s       ▼                                  └──▶ send_email (review)
                    later)          fraud_check
                                    (charge fails once on a "gateway timeout"
                                     and is retried with the default backoff)

* Every hand-off is a child activity enqueued with ``ctx.executor`` under an
  idempotency key derived from the order id, so a retried parent never creates
  a second child.
* ``reserve_stock`` and ``charge_payment`` fail on their first attempt
  (decided by ``ctx.retry_count``, so the run is deterministic) and succeed on
  the retry.
* ``charge_payment`` waits for its ``fraud_check`` child's result; awaiting a
  child holds a worker slot, so run with ``--concurrency`` of 2 or more.
* ``request_review`` runs ``review_delay_s`` seconds (payload, default 5)
  after shipping.
* ``send_email`` is a plain ``def``; the engine runs it in its thread pool.

The engine has no backend: ``runnerq-fast worker examples.shop.app:engine
--backend URL`` (or ``RUNNERQ_BACKEND``) decides where the queue lives.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any

import runnerq_fast as rq

__all__ = ["ACTIVITIES_PER_ORDER", "QUEUE", "engine", "sample_order"]

log = logging.getLogger("examples.shop")

QUEUE = "shop"
"""Queue every shop activity lives on."""

ACTIVITIES_PER_ORDER = 8
"""Activities one successful order creates, ``place_order`` included."""

engine = rq.WorkerEngine(None, queue_name=QUEUE)


def sample_order(order_id: str, *, review_delay_s: float = 5.0) -> dict[str, Any]:
    """A valid ``place_order`` payload for ``order_id``.

    Parameters
    ----------
    order_id : str
        Unique order reference.
    review_delay_s : float
        Seconds between shipping and the review request.
    """
    return {
        "order_id": order_id,
        "email": f"customer+{order_id}@example.com",
        "items": [
            {"sku": "MUG-01", "qty": 2, "price_cents": 1250},
            {"sku": "TEE-M", "qty": 1, "price_cents": 2400},
        ],
        "review_delay_s": review_delay_s,
    }


def _order_id(payload: Any) -> str:
    if not isinstance(payload, dict) or not isinstance(payload.get("order_id"), str) or not payload["order_id"]:
        raise rq.NonRetryableError("payload needs a non-empty string 'order_id'")
    return str(payload["order_id"])


@engine.activity("place_order")
async def place_order(payload: Any, ctx: rq.ActivityContext) -> dict[str, Any]:
    """Validate an order and hand it to the warehouse.

    Raises
    ------
    NonRetryableError
        For an order without items or with a bad quantity (never retried).
    """
    order_id = _order_id(payload)
    items = payload.get("items") or []
    if not items or any(int(i.get("qty", 0)) < 1 for i in items):
        raise rq.NonRetryableError(f"order {order_id} has no items or a quantity below 1")
    total = sum(int(i["qty"]) * int(i["price_cents"]) for i in items)
    order = {**payload, "total_cents": total}
    child = await (
        ctx.executor.activity("reserve_stock")
        .payload(order)
        .priority(rq.Priority.HIGH)
        .idempotency_key(f"reserve:{order_id}")
        .execute()
    )
    log.info("order %s accepted, total %.2f, reservation %s", order_id, total / 100, child.activity_id)
    return {"order_id": order_id, "total_cents": total, "reserve_activity": child.activity_id}


@engine.activity("reserve_stock")
async def reserve_stock(payload: Any, ctx: rq.ActivityContext) -> dict[str, Any]:
    """Reserve every item; the warehouse is "busy" on the first attempt.

    Raises
    ------
    RetryableError
        On the first attempt, with ``retry_after=0.2`` seconds.
    """
    order_id = _order_id(payload)
    if ctx.retry_count == 0:
        raise rq.RetryableError("warehouse API busy (503)", retry_after=0.2)
    reservation = hashlib.sha1(order_id.encode()).hexdigest()[:10]
    await (
        ctx.executor.activity("charge_payment")
        .payload({**payload, "reservation": reservation})
        .idempotency_key(f"charge:{order_id}")
        .execute()
    )
    return {"order_id": order_id, "reservation": reservation, "attempt": ctx.retry_count + 1}


@engine.activity("fraud_check")
async def fraud_check(payload: Any, ctx: rq.ActivityContext) -> dict[str, Any]:
    """Score the order; anything above 1,000.00 is "suspicious"."""
    total = int(payload["total_cents"])
    return {"order_id": _order_id(payload), "score": 0.9 if total > 100_000 else 0.05}


@engine.activity("charge_payment")
async def charge_payment(payload: Any, ctx: rq.ActivityContext) -> dict[str, Any]:
    """Run the fraud check (waiting for it), then charge the card.

    Raises
    ------
    NonRetryableError
        If the fraud score is above 0.5.
    ConnectionError
        On the first attempt ("gateway timeout"): any exception is retryable,
        so the default exponential backoff (1 s) applies.
    """
    order_id = _order_id(payload)
    check = await (
        ctx.executor.activity("fraud_check")
        .payload(payload)
        .idempotency_key(f"fraud:{order_id}")  # a retry reuses the first check
        .execute()
    )
    verdict = await check.result(timeout=60)
    if verdict["score"] > 0.5:
        raise rq.NonRetryableError(f"order {order_id} rejected by fraud check (score {verdict['score']})")
    if ctx.retry_count == 0:
        raise ConnectionError("payment gateway timeout")
    charge_id = f"ch_{hashlib.sha1(f'charge:{order_id}'.encode()).hexdigest()[:12]}"
    await (
        ctx.executor.activity("ship_order")
        .payload({**payload, "charge_id": charge_id})
        .idempotency_key(f"ship:{order_id}")
        .execute()
    )
    return {"order_id": order_id, "charge_id": charge_id, "amount_cents": payload["total_cents"]}


@engine.activity("ship_order")
async def ship_order(payload: Any, ctx: rq.ActivityContext) -> dict[str, Any]:
    """Create a shipment, e-mail the receipt now and ask for a review later."""
    order_id = _order_id(payload)
    tracking = f"TRK{int(hashlib.sha1(order_id.encode()).hexdigest()[:8], 16):010d}"
    executor = ctx.executor
    await executor.enqueue_many([
        executor.activity("send_email")
        .payload({"to": payload["email"], "subject": f"Order {order_id} shipped", "tracking": tracking})
        .idempotency_key(f"receipt:{order_id}"),
        executor.activity("request_review")
        .payload({"order_id": order_id, "email": payload["email"]})
        .priority(rq.Priority.LOW)
        .delay(float(payload.get("review_delay_s", 5.0)))
        .idempotency_key(f"review:{order_id}"),
    ])
    return {"order_id": order_id, "tracking": tracking}


@engine.activity("request_review")
async def request_review(payload: Any, ctx: rq.ActivityContext) -> dict[str, Any]:
    """The delayed follow-up: send the review e-mail."""
    order_id = _order_id(payload)
    email = await (
        ctx.executor.activity("send_email")
        .payload({"to": payload["email"], "subject": f"How was order {order_id}?"})
        .priority(rq.Priority.LOW)
        .idempotency_key(f"review-mail:{order_id}")
        .execute()
    )
    return {"order_id": order_id, "email_activity": email.activity_id}


@engine.activity("send_email")
def send_email(payload: Any, ctx: rq.ActivityContext) -> dict[str, Any]:
    """Pretend to talk SMTP (a blocking call, so a plain ``def`` run in a thread)."""
    time.sleep(0.001)
    log.info("mail to %s: %s", payload["to"], payload["subject"])
    return {"to": payload["to"], "subject": payload["subject"], "sent_at": time.time()}
