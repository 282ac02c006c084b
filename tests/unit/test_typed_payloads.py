"""Typed payloads (issue 27 item 5): which annotation a handler's payload is decoded into, and typed enqueue.

The round trip through every backend is in ``tests/conformance.py`` (``HardeningConformance``); the codec's
accepted and refused values in ``test_parity_codec.py``; what mypy checks in ``tests/typing/cases/typed_payloads.py``.
"""

from __future__ import annotations

import functools
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import pytest

import runnerq_fast as rq
from runnerq_fast.codec import decode_json
from runnerq_fast.engine.outcomes import Registered
from runnerq_fast.testing import run_eagerly
from tests.typed_payloads import ORDER_ID, SAMPLE_JSON, Order, Refund, sample_order

if TYPE_CHECKING:
    from decimal import Decimal as OnlyForTypeCheckers

T = TypeVar("T")


class _Other(msgspec.Struct):
    x: int


class _Plain:
    """A class msgspec knows nothing about."""


async def typed(payload: Order, ctx: rq.ActivityContext) -> None: ...
async def untyped(payload, ctx): ...  # type: ignore[no-untyped-def]
async def any_(payload: Any, ctx: rq.ActivityContext) -> None: ...
async def obj(payload: object, ctx: rq.ActivityContext) -> None: ...
async def generic(payload: T, ctx: rq.ActivityContext) -> None: ...
def with_default(payload: list[uuid.UUID], ctx: rq.ActivityContext, extra: int = 0) -> None: ...
async def hidden(payload: OnlyForTypeCheckers, ctx: rq.ActivityContext) -> None: ...
async def plain_class(payload: _Plain, ctx: rq.ActivityContext) -> None: ...
async def nested_plain(payload: dict[str, list[_Plain]], ctx: rq.ActivityContext) -> None: ...
async def untagged(payload: Order | _Other, ctx: rq.ActivityContext) -> None: ...


class _Handlers:
    async def method(self, payload: Refund, ctx: rq.ActivityContext) -> None: ...

    async def __call__(self, payload: Refund, ctx: rq.ActivityContext) -> None: ...


@pytest.mark.parametrize("fn", [untyped, any_, obj, generic], ids=["none", "Any", "object", "TypeVar"])
def test_an_unannotated_payload_keeps_the_plain_decoder(fn: Any) -> None:
    reg = Registered(fn, "t")
    assert reg.payload_type is None
    assert reg.decode is decode_json  # the same callable as before: nothing added per activity


@pytest.mark.parametrize(
    ("fn", "tp"),
    [
        (typed, Order),  # a string annotation (from __future__ import annotations), evaluated in the module
        (with_default, list[uuid.UUID]),
        (_Handlers().method, Refund),  # a bound method: self is not the payload
        (_Handlers(), Refund),  # a callable object
        (functools.partial(lambda flag, payload, ctx: None, True), None),  # no annotation left
    ],
)
def test_the_annotation_is_resolved_through_every_kind_of_callable(fn: Any, tp: Any) -> None:
    assert Registered(fn, "t").payload_type == tp


def test_a_typed_decoder_is_strict_and_names_the_field() -> None:
    reg = Registered(typed, "t")
    assert reg.decode(msgspec.json.encode(sample_order())) == sample_order()
    with pytest.raises(msgspec.ValidationError, match=r"Expected `int`, got `str` - at `\$\.size`"):
        reg.decode(msgspec.json.encode({**SAMPLE_JSON, "size": "2"}))  # strict: no str -> int coercion


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (hidden, "the payload annotation 'OnlyForTypeCheckers' of handler hidden cannot be evaluated (NameError"),
        (plain_class, "holds _Plain, which msgspec cannot decode into"),
        (nested_plain, "holds _Plain, which msgspec cannot decode into"),
        (untagged, "is not a type msgspec can decode into"),
    ],
)
def test_an_annotation_that_cannot_be_decoded_into_is_refused_at_registration(fn: Any, message: str) -> None:
    engine = rq.WorkerEngine("memory://")
    with pytest.raises(rq.ConfigError) as info:
        engine.register_activity("t", fn)
    assert message in str(info.value) and "annotate Any" in str(info.value)
    assert engine.activity_types == []


async def test_typed_enqueue_takes_the_handler_and_stores_its_type_name() -> None:
    engine = rq.WorkerEngine("memory://", queue_name="q")
    other = rq.WorkerEngine("memory://", queue_name="q2")

    async def ship(payload: Order, ctx: rq.ActivityContext) -> None: ...

    engine.register_activity("ship", ship)
    other.register_activity("ship", ship)  # the same name elsewhere: still one type
    backend = rq.MemoryBackend()
    ex = rq.ActivityExecutor(backend, "q")
    item = ex.activity(ship).payload(sample_order()).build()
    assert item.activity_type == "ship" and msgspec.json.decode(item.payload) == SAMPLE_JSON
    other.register_activity("ship_again", ship)
    with pytest.raises(rq.InvalidActivityError, match=r"several activity types \('ship', 'ship_again'\)"):
        ex.activity(ship)

    async def stray(payload: Order, ctx: rq.ActivityContext) -> None: ...

    with pytest.raises(rq.InvalidActivityError, match="stray is not a registered handler"):
        ex.activity(stray)
    assert ex.activity("ship").activity_type == "ship"  # a name still works
    await backend.close()


async def test_run_eagerly_decodes_into_the_handler_type() -> None:
    engine = rq.WorkerEngine("memory://")

    @engine.activity("refund")
    def refund(payload: Refund, ctx: rq.ActivityContext) -> int:
        assert type(payload) is Refund and type(payload.order_id) is uuid.UUID
        return payload.cents

    @engine.activity("when")
    async def when(payload: datetime, ctx: rq.ActivityContext) -> str:
        return payload.isoformat()

    assert await run_eagerly(engine, "refund", Refund(ORDER_ID, 7)) == 7
    assert await run_eagerly(engine, "when", datetime(2026, 1, 1, tzinfo=UTC)) == "2026-01-01T00:00:00+00:00"
    with pytest.raises(msgspec.ValidationError, match="Object missing required field `order_id`"):
        await run_eagerly(engine, "refund", {"cents": 1})


def test_the_sync_client_takes_the_handler_and_encodes_typed_values() -> None:
    engine = rq.WorkerEngine("memory://", queue_name="s")

    @engine.activity("ship")
    async def ship(payload: Order, ctx: rq.ActivityContext) -> None: ...

    with rq.SyncExecutor("memory://", "s") as client:
        activity_id = client.activity(ship).payload(sample_order()).execute()
        snap = client.run(lambda ex: ex.backend.get_activity(activity_id))
        assert snap is not None and snap.activity_type == "ship"
        assert Registered(ship, "ship").decode(snap.payload) == sample_order()
        with pytest.raises(rq.InvalidActivityError, match=r"payload\.x is tuple"):
            client.activity("t").payload(_Other((1,))).execute()  # type: ignore[arg-type]


def test_a_schedule_takes_a_typed_payload() -> None:
    engine = rq.WorkerEngine("memory://")
    schedule = engine.periodic(60, "refund", payload=Refund(ORDER_ID, 1))
    assert schedule.payload == Refund(ORDER_ID, 1)
    with pytest.raises(rq.ConfigError, match=r"payload\.cents is bytes"):
        engine.periodic(60, "refund", payload=Refund(ORDER_ID, b""), name="bad")  # type: ignore[arg-type]
