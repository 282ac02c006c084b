"""Micro-benchmarks: each hot path, compiled vs its pure-Python twin, in one run.

Marked ``bench`` (deselected by the default test run). Run with::

    .venv/bin/python -m pytest benchmarks/micro -m bench --benchmark-json=micro.json
    .venv/bin/python benchmarks/micro/ratios.py micro.json

Each group (``--benchmark-group-by=group``) holds the ``pure`` and the
``compiled`` variant of one operation on the same input.
"""

from __future__ import annotations

import asyncio
import importlib
import uuid
from types import ModuleType
from typing import Any, cast

import pytest
from asyncpg.pgproto.pgproto import UUID as PgUUID

from runnerq_fast.codec import decode_json
from runnerq_fast.models import Ack, LeaseRef, NewActivity

pytestmark = pytest.mark.bench


def _pair(name: str) -> list[Any]:
    pure = importlib.import_module(f"runnerq_fast.{name}_py")
    try:
        compiled: ModuleType | None = importlib.import_module(f"runnerq_fast.{name}")
    except ImportError:
        compiled = None
    return [
        pytest.param(pure, id="pure"),
        pytest.param(compiled, id="compiled", marks=pytest.mark.skipif(compiled is None, reason="not built")),
    ]


SMALL = {"order_id": 42, "to": "a@b.c", "items": [1, 2, 3]}
WITH_NULL = {"order_id": 42, "note": None, "lines": [{"sku": f"s{i}", "qty": i, "price": 1.5} for i in range(20)]}
MEDIUM = {f"key{i}": {"n": i, "s": "x" * 20, "f": i / 3} for i in range(50)}
LARGE = {"items": [{"sku": f"s{i}", "qty": i, "price": i * 0.5, "tags": ["a", "b"]} for i in range(5000)]}
BATCH = 500
UUIDS = [PgUUID(uuid.uuid4().bytes) for _ in range(BATCH)]  # the UUID type asyncpg returns
T0 = 1_700_000_000_000
T0_SENT = ((T0 - 946_684_800_000) * 1000).to_bytes(8, "big", signed=True)  # timestamptz_send() of T0 ms
ROWS = [(u, "send_email", '{"to":"a@b.c"}', 2, 0, 3, 300_000, "{}", T0_SENT, T0_SENT) for u in UUIDS]
ACKS = [Ack(u.hex, "tok", 1, b'{"ok":true}' if i % 2 else None) for i, u in enumerate(UUIDS)]
LEASES = [LeaseRef(u.hex, "tok") for u in UUIDS]
NEW = [NewActivity(u.hex, "send_email", b'{"to":"a@b.c"}') for u in UUIDS]


@pytest.mark.parametrize("impl", _pair("_codec"))
@pytest.mark.parametrize(
    ("label", "payload"), [("small", SMALL), ("with-null", WITH_NULL), ("medium", MEDIUM), ("large", LARGE)]
)
def test_encode_json(benchmark: Any, impl: ModuleType, label: str, payload: Any) -> None:
    benchmark.group = f"codec.encode_json {label}"
    assert benchmark(impl.encode_json, payload, 1 << 20) == impl.encode_json(payload, 0)


@pytest.mark.parametrize("impl", _pair("_codec"))
def test_decode_json(benchmark: Any, impl: ModuleType) -> None:
    benchmark.group = "codec.decode_json small"
    assert benchmark(impl.decode_json, b'{"order_id":42,"to":"a@b.c"}')["order_id"] == 42


@pytest.mark.parametrize("impl", _pair("_codec"))
def test_encode_metadata(benchmark: Any, impl: ModuleType) -> None:
    benchmark.group = "codec.encode_metadata"
    assert benchmark(impl.encode_metadata, {"tenant": "t1", "trace": "abc"}) == b'{"tenant":"t1","trace":"abc"}'


@pytest.mark.parametrize("impl", _pair("_ids"))
def test_new_activity_ids(benchmark: Any, impl: ModuleType) -> None:
    benchmark.group = "ids.new_activity_ids 500"
    assert len(benchmark(impl.new_activity_ids, BATCH)) == BATCH


@pytest.mark.parametrize("impl", _pair("_ids"))
def test_new_activity_id(benchmark: Any, impl: ModuleType) -> None:
    benchmark.group = "ids.new_activity_id"
    assert len(benchmark(impl.new_activity_id)) == 32


@pytest.mark.parametrize("impl", _pair("backends.redis._scoring"))
def test_encode_score(benchmark: Any, impl: ModuleType) -> None:
    benchmark.group = "scoring.encode_score"
    assert benchmark(impl.encode_score, 3, 2, 1_700_000_000_000) > 0


@pytest.mark.parametrize("impl", _pair("backends.redis._scoring"))
def test_decode_score(benchmark: Any, impl: ModuleType) -> None:
    benchmark.group = "scoring.decode_score"
    score = impl.encode_score(3, 2, 1_700_000_000_000)
    assert benchmark(impl.decode_score, score) == (3, 2, 1_700_000_000_000)


@pytest.mark.parametrize("impl", _pair("engine._backoff"))
def test_backoff(benchmark: Any, impl: ModuleType) -> None:
    benchmark.group = "backoff.backoff_seconds"
    assert benchmark(impl.backoff_seconds, 5, 1.0, 3600.0, 0.0) == 32.0


@pytest.mark.parametrize("impl", _pair("backends.postgres._rows"))
def test_claimed_from_rows(benchmark: Any, impl: ModuleType) -> None:
    benchmark.group = f"rows.claimed_from_rows x{BATCH}"
    claimed = benchmark(impl.claimed_from_rows, ROWS, "tok")
    assert len(claimed) == BATCH and claimed[0].created_at_ms == T0 == claimed[-1].ready_at_ms


@pytest.mark.parametrize("impl", _pair("backends.postgres._rows"))
def test_ack_params(benchmark: Any, impl: ModuleType) -> None:
    benchmark.group = f"rows.ack_params x{BATCH}"
    assert len(benchmark(impl.ack_params, ACKS)[0]) == BATCH


@pytest.mark.parametrize("impl", _pair("backends.postgres._rows"))
def test_lease_params(benchmark: Any, impl: ModuleType) -> None:
    benchmark.group = f"rows.lease_params x{BATCH}"
    assert len(benchmark(impl.lease_params, LEASES)[1]) == BATCH


@pytest.mark.parametrize("impl", _pair("backends.postgres._rows"))
def test_enqueue_params(benchmark: Any, impl: ModuleType) -> None:
    benchmark.group = f"rows.enqueue_params x{BATCH}"
    assert len(benchmark(impl.enqueue_params, NEW)[2]) == BATCH


async def _noop(payload: Any, ctx: Any) -> None:
    return None


@pytest.mark.parametrize("impl", _pair("engine._deadline"))
def test_deadline_call(benchmark: Any, impl: ModuleType) -> None:
    benchmark.group = f"deadline.Deadlines.call x{BATCH} (one task)"
    loop = asyncio.new_event_loop()
    try:
        deadlines = impl.Deadlines(loop)

        async def many() -> int:
            call = deadlines.call
            for i in range(BATCH):
                await call(_noop, i, None, 300.0)
            return BATCH

        assert benchmark(lambda: loop.run_until_complete(many())) == BATCH
    finally:
        loop.close()


def _memstore_pair() -> list[Any]:
    pure = importlib.import_module("runnerq_fast.backends._memstore_py")
    try:
        compiled: ModuleType | None = importlib.import_module("runnerq_fast.backends._memstore")
    except ImportError:
        compiled = None
    return [
        pytest.param(pure, id="pure"),
        pytest.param(compiled, id="compiled", marks=pytest.mark.skipif(compiled is None, reason="not built")),
    ]


@pytest.mark.parametrize("impl", _memstore_pair())
def test_memstore_claim_and_ack(benchmark: Any, impl: ModuleType) -> None:
    benchmark.group = f"backends.memstore claim+ack x{BATCH} (of 5000 ready)"

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        store = impl.StoreCore()
        q = store._queue("q")
        for i in range(5000):
            row = impl.Row("q", NewActivity(f"{i:032x}", "t", b"{}", priority=1 + i % 4), T0)
            store._rows[row.id] = row
            q.rows[row.id] = row
            store._push_ready(q, row)
        return (store, q), {}

    def claim_and_ack(store: Any, q: Any) -> int:
        claimed = store._claim_from(q, [q.by_type["t"]], BATCH, "tok", T0 + 30_000, T0, "w")
        rejected = store._ack_batch(q, [Ack(c.id, c.claim_token, 1) for c in claimed], T0)
        return len(claimed) - len(rejected)

    assert benchmark.pedantic(claim_and_ack, setup=setup, rounds=40) == BATCH


def _worker_pair() -> list[Any]:
    pure = (
        importlib.import_module("runnerq_fast.engine._worker_py"),
        importlib.import_module("runnerq_fast.engine._deadline_py"),
    )
    try:
        compiled: tuple[ModuleType, ModuleType] | None = (
            importlib.import_module("runnerq_fast.engine._worker"),
            importlib.import_module("runnerq_fast.engine._deadline"),
        )
    except ImportError:
        compiled = None
    return [
        pytest.param(pure, id="pure"),
        pytest.param(compiled, id="compiled", marks=pytest.mark.skipif(compiled is None, reason="not built")),
    ]


class _WorkerHandler:
    fn = staticmethod(_noop)
    is_async = True
    decode = staticmethod(decode_json)  # an untyped handler's (Registered.decode)
    payload_type = None


@pytest.mark.parametrize("impl", _worker_pair())
def test_worker_loop(benchmark: Any, impl: tuple[ModuleType, ModuleType]) -> None:
    """Hand-off, handler under its timeout, ack buffered: BATCH activities through 16 worker tasks."""
    from types import SimpleNamespace

    from runnerq_fast.engine.outcomes import Outcomes
    from runnerq_fast.models import ClaimedActivity

    worker, deadline = impl
    benchmark.group = f"worker.worker_loop x{BATCH} (16 workers)"
    items = [ClaimedActivity(u.hex, "t", b"{}", 2, 0, 3, 300_000, b"{}", "tok", T0, T0) for u in UUIDS]
    loop = asyncio.new_event_loop()
    try:
        async def drain() -> int:
            eng = SimpleNamespace(
                handlers={"t": _WorkerHandler()}, deadlines=deadline.Deadlines(loop), executor=None,
                cancellation=asyncio.Event(), hooks=(), slot_free=asyncio.Event(), busy=BATCH, acks=[],
                ack_ready=asyncio.Event(), ack_full=asyncio.Event(), ack_batch_size=BATCH,
                stats={"completed": 0}, metrics_on=False, stopping=False,
                type_busy=None, running={}, cancel_ids=set(), lost_ids=set(), done_metrics=[], progress=None,
            )
            eng.push_ack = lambda ack: Outcomes.push_ack(cast(Outcomes, eng), ack)  # the engine's buffering
            local = worker.Handoff(loop)
            tasks = [loop.create_task(worker.worker_loop(eng, local)) for _ in range(16)]
            local.put_batch(items, {})
            for _ in tasks:
                local.put_nowait(None)
            await asyncio.gather(*tasks)
            return len(eng.acks)

        assert benchmark(lambda: loop.run_until_complete(drain())) == BATCH
    finally:
        loop.close()
