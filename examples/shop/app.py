"""An order pipeline: eight activities per order, each step enqueueing the next.

::

    place_order ─▶ reserve_stock ─▶ fraud_check ─▶ charge_payment ─▶ ship_order ─┬─▶ send_email (receipt)
                   (fails once,                    (fails once,                  └─▶ request_review (delayed)
                    retried 0.2 s                   retried after the                  └─▶ send_email (review)
                    later)                          default 1 s backoff)

* No handler ever waits for another activity's result: each step does its
  work, enqueues the next step with ``ctx.executor`` and returns. A handler
  that awaited a child would hold its worker slot meanwhile, and with every
  slot taken by waiting parents the children could never run (a deadlock).
  Chained forward, the pipeline completes with any ``--concurrency`` >= 1.
* Every hand-off is enqueued under the idempotency key ``"<order_id>:<step>"``
  with ``OnDuplicate.RETURN_EXISTING``, so a retried (or re-delivered) parent
  never creates a second child.
* ``reserve_stock`` and ``charge_payment`` fail on their first attempt
  (decided by ``ctx.retry_count``, so the run is deterministic) and succeed on
  the retry.
* ``fraud_check`` rejects orders above 1,000.00 with ``NonRetryableError``.
* ``request_review`` runs ``review_delay_s`` seconds (payload, default 5)
  after shipping.
* ``send_email`` is a plain ``def``; the engine runs it in its thread pool.
* An order without items fails at once with ``NonRetryableError`` (no retries).

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

FRAUD_LIMIT_CENTS = 100_000
"""Orders above this total are rejected by ``fraud_check``."""

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


def _next_step(ctx: rq.ActivityContext, activity_type: str, order_id: str, step: str) -> rq.ActivityBuilder:
    """The builder of the order's next step, deduplicated on ``"<order_id>:<step>"``.

    ``RETURN_EXISTING``: if this parent runs again (a retry, or a re-delivery
    after its worker died), enqueueing returns the child created the first
    time instead of a second one.
    """
    return ctx.executor.activity(activity_type).idempotency_key(f"{order_id}:{step}", rq.OnDuplicate.RETURN_EXISTING)


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
        _next_step(ctx, "reserve_stock", order_id, "reserve")
        .payload(order)
        .priority(rq.Priority.HIGH)
        .execute()
    )
    log.info("order %s accepted, total %.2f, reservation %s", order_id, total / 100, child.activity_id)
    return {"order_id": order_id, "total_cents": total, "reserve_activity": child.activity_id}


@engine.activity("reserve_stock")
async def reserve_stock(payload: Any, ctx: rq.ActivityContext) -> dict[str, Any]:
    """Reserve every item, then send the order to the fraud check.

    Raises
    ------
    RetryableError
        On the first attempt (the warehouse is "busy"), with ``retry_after=0.2`` seconds.
    """
    order_id = _order_id(payload)
    if ctx.retry_count == 0:
        raise rq.RetryableError("warehouse API busy (503)", retry_after=0.2)
    reservation = hashlib.sha1(order_id.encode()).hexdigest()[:10]
    await _next_step(ctx, "fraud_check", order_id, "fraud").payload({**payload, "reservation": reservation}).execute()
    return {"order_id": order_id, "reservation": reservation, "attempt": ctx.retry_count + 1}


@engine.activity("fraud_check")
async def fraud_check(payload: Any, ctx: rq.ActivityContext) -> dict[str, Any]:
    """Score the order and, if it passes, send it on to be charged.

    Raises
    ------
    NonRetryableError
        For an order above 1,000.00 ("suspicious"); the order stops here.
    """
    order_id = _order_id(payload)
    score = 0.9 if int(payload["total_cents"]) > FRAUD_LIMIT_CENTS else 0.05
    if score > 0.5:
        raise rq.NonRetryableError(f"order {order_id} rejected by fraud check (score {score})")
    await _next_step(ctx, "charge_payment", order_id, "charge").payload({**payload, "fraud_score": score}).execute()
    return {"order_id": order_id, "score": score}


@engine.activity("charge_payment")
async def charge_payment(payload: Any, ctx: rq.ActivityContext) -> dict[str, Any]:
    """Charge the card, then ship.

    Raises
    ------
    ConnectionError
        On the first attempt ("gateway timeout"): any exception is retryable,
        so the default exponential backoff (1 s) applies.
    """
    order_id = _order_id(payload)
    if ctx.retry_count == 0:
        raise ConnectionError("payment gateway timeout")
    charge_id = f"ch_{hashlib.sha1(f'charge:{order_id}'.encode()).hexdigest()[:12]}"
    await _next_step(ctx, "ship_order", order_id, "ship").payload({**payload, "charge_id": charge_id}).execute()
    return {"order_id": order_id, "charge_id": charge_id, "amount_cents": payload["total_cents"]}


@engine.activity("ship_order")
async def ship_order(payload: Any, ctx: rq.ActivityContext) -> dict[str, Any]:
    """Create a shipment, e-mail the receipt now and ask for a review later."""
    order_id = _order_id(payload)
    tracking = f"TRK{int(hashlib.sha1(order_id.encode()).hexdigest()[:8], 16):010d}"
    await ctx.executor.enqueue_many([
        _next_step(ctx, "send_email", order_id, "receipt")
        .payload({"to": payload["email"], "subject": f"Order {order_id} shipped", "tracking": tracking}),
        _next_step(ctx, "request_review", order_id, "review")
        .payload({"order_id": order_id, "email": payload["email"]})
        .priority(rq.Priority.LOW)
        .delay(float(payload.get("review_delay_s", 5.0))),
    ])
    return {"order_id": order_id, "tracking": tracking}


@engine.activity("request_review")
async def request_review(payload: Any, ctx: rq.ActivityContext) -> dict[str, Any]:
    """The delayed follow-up: send the review e-mail."""
    order_id = _order_id(payload)
    email = await (
        _next_step(ctx, "send_email", order_id, "review-mail")
        .payload({"to": payload["email"], "subject": f"How was order {order_id}?"})
        .priority(rq.Priority.LOW)
        .execute()
    )
    return {"order_id": order_id, "email_activity": email.activity_id}


@engine.activity("send_email")
def send_email(payload: Any, ctx: rq.ActivityContext) -> dict[str, Any]:
    """Pretend to talk SMTP (a blocking call, so a plain ``def`` run in a thread)."""
    time.sleep(0.001)
    log.info("mail to %s: %s", payload["to"], payload["subject"])
    return {"to": payload["to"], "subject": payload["subject"], "sent_at": time.time()}
