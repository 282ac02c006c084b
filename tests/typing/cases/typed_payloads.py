"""Typed enqueue (issue 27 item 5): a builder started from a handler takes its payload type; checked, never run.

Same conventions as ``public_api.py`` (a note or an error expected on each marked line, no other error).
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass
from typing import Any, reveal_type

import msgspec

import runnerq_fast as rq

engine = rq.WorkerEngine("memory://", queue_name="shop")


class Order(msgspec.Struct):
    id: uuid.UUID
    placed_at: datetime.datetime
    lines: list[str]


@dataclass
class Refund:
    order_id: uuid.UUID
    cents: int


@engine.activity("ship")
async def ship(payload: Order, ctx: rq.ActivityContext) -> None:
    reveal_type(payload.placed_at)  # N: Revealed type is "datetime.datetime"


@engine.activity("refund")
def refund(payload: Refund, ctx: rq.ActivityContext) -> int:  # a plain def handler too
    return payload.cents


@engine.activity("legacy")
async def legacy(payload: Any, ctx: rq.ActivityContext) -> None:
    pass


order = Order(uuid.uuid4(), datetime.datetime.now(datetime.UTC), ["sku-1"])


async def enqueue(client: rq.SyncExecutor) -> None:
    typed = engine.executor.activity(ship)
    reveal_type(typed)  # N: Revealed type is "runnerq_fast.executor.ActivityBuilder[tests.typing.cases.typed_payloads.Order]"
    await typed.payload(order).priority(rq.Priority.HIGH).execute()  # the setters keep the payload type
    await engine.executor.activity(ship).priority(rq.Priority.HIGH).payload(order).execute()
    await engine.executor.activity(refund).payload(Refund(order.id, 250)).execute()
    await engine.executor.activity(legacy).payload({"anything": [1, 2]}).execute()
    await engine.executor.activity("ship").payload({"by": "name"}).execute()  # a type name stays untyped
    engine.executor.activity(ship).payload({"id": "x"})  # E: Argument 1 to "payload" of "ActivityBuilder" has incompatible type "dict[str, str]"; expected "Order"
    engine.executor.activity(ship).delay(5).payload(Refund(order.id, 1))  # E: Argument 1 to "payload" of "ActivityBuilder" has incompatible type "Refund"; expected "Order"
    engine.executor.activity(refund).payload(order)  # E: Argument 1 to "payload" of "ActivityBuilder" has incompatible type "Order"; expected "Refund"
    reveal_type(client.activity(ship))  # N: Revealed type is "runnerq_fast.sync.SyncActivityBuilder[tests.typing.cases.typed_payloads.Order]"
    client.activity(ship).payload(order).execute()
    client.activity(ship).timeout(30).payload([order])  # E: Argument 1 to "payload" of "SyncActivityBuilder" has incompatible type "list[Order]"; expected "Order"
