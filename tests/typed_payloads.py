"""Payload types shared by the typed-payload tests (issue 27 item 5): engine, sync client, HTTP and CLI.

Module level on purpose: a handler's string annotation (``from __future__
import annotations``) is evaluated in its module, so a payload type defined
inside a test function could not be resolved.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import msgspec

import runnerq_fast as rq


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Size(enum.IntEnum):
    S = 1
    M = 2


@dataclasses.dataclass
class Line:
    sku: str
    qty: int
    unit_price: Decimal


class Order(msgspec.Struct):
    id: uuid.UUID
    placed_at: datetime
    local_time: datetime
    ship_on: date
    cutoff: time
    window: timedelta
    color: Color
    size: Size
    lines: list[Line]
    note: str | None = None


@dataclasses.dataclass
class Refund:
    order_id: uuid.UUID
    cents: int


class Tagged(msgspec.Struct):
    tags: Any


class Reading(msgspec.Struct):
    value: float


class Weird(enum.Enum):
    HALF = 0.5


ORDER_ID = uuid.UUID("0193a4b2-7c1d-7e3f-8a9b-0c1d2e3f4a5b")


def sample_order() -> Order:
    """An :class:`Order` holding every typed value: aware and naive datetimes, date, time, timedelta, UUID,
    Decimal (trailing zero kept), both enum kinds, nested dataclasses, an optional field."""
    return Order(
        id=ORDER_ID,
        placed_at=datetime(2026, 12, 7, 23, 5, 1, 250000, tzinfo=timezone(timedelta(hours=2))),
        local_time=datetime(2026, 12, 7, 9, 30),
        ship_on=date(2026, 12, 9),
        cutoff=time(17, 0, tzinfo=UTC),
        window=timedelta(days=2, seconds=30),
        color=Color.BLUE,
        size=Size.M,
        lines=[Line("sku-1", 2, Decimal("9.90")), Line("sku-2", 1, Decimal("0.10"))],
    )


SAMPLE_JSON: dict[str, Any] = {
    "id": "0193a4b2-7c1d-7e3f-8a9b-0c1d2e3f4a5b",
    "placed_at": "2026-12-07T23:05:01.250000+02:00",
    "local_time": "2026-12-07T09:30:00",
    "ship_on": "2026-12-09",
    "cutoff": "17:00:00Z",
    "window": "P2DT30S",
    "color": "blue",
    "size": 2,
    "lines": [{"sku": "sku-1", "qty": 2, "unit_price": "9.90"}, {"sku": "sku-2", "qty": 1, "unit_price": "0.10"}],
    "note": None,
}
"""What an unannotated handler receives for :func:`sample_order` (the JSON value), and what HTTP and the CLI send."""


def typed_engine(backend: rq.Backend | str, queue: str, received: list[Any], **kw: Any) -> rq.WorkerEngine:
    """An engine with handlers ``order`` (payload: Order), ``refund`` (plain def, Refund), ``when`` (datetime),
    ``orders`` (list[Order]) and ``plain`` (Any), each appending what it got to ``received``."""
    from tests.conformance import FAST

    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": queue, **kw})

    @engine.activity("order")
    async def order(payload: Order, ctx: rq.ActivityContext) -> str:
        received.append(payload)
        return f"{payload.id} {sum(line.qty * line.unit_price for line in payload.lines)}"

    @engine.activity("refund")
    def refund(payload: Refund, ctx: rq.ActivityContext) -> int:
        received.append(payload)
        return payload.cents

    @engine.activity("when")
    async def when(payload: datetime, ctx: rq.ActivityContext) -> None:
        received.append(payload)

    @engine.activity("orders")
    async def orders(payload: list[Order], ctx: rq.ActivityContext) -> int:
        received.append(payload)
        return len(payload)

    @engine.activity("plain")
    async def plain(payload: Any, ctx: rq.ActivityContext) -> None:
        received.append(payload)

    return engine
