"""rq.SyncExecutor against real SQLite, PostgreSQL and Redis, with a worker engine in another event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import runnerq_fast as rq
from tests.conformance import FAST


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(URL, connect options) of a fresh store on each real backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/sync.db", {}
    elif request.param == "postgresql":
        yield request.getfixturevalue("pg_url"), {}
    else:
        yield request.getfixturevalue("redis_url"), {"namespace": request.getfixturevalue("redis_namespace")}


async def test_threads_enqueue_and_wait_for_results_while_an_engine_works(target: tuple[str, dict[str, Any]]) -> None:
    url, options = target
    backend = await rq.connect(url, **options)
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "sync"})

    @engine.activity("double")
    async def double(payload: dict[str, int], ctx: rq.ActivityContext) -> int:
        if payload["n"] < 0:
            raise rq.NonRetryableError("negative")
        return payload["n"] * 2

    results: dict[int, Any] = {}
    lock = threading.Lock()

    def work(client: rq.SyncExecutor, t: int) -> None:
        ids = [(t * 100 + i, client.activity("double").payload({"n": t * 100 + i}).execute()) for i in range(10)]
        for n, activity_id in ids:
            value = client.result(activity_id, timeout=20)
            with lock:
                results[n] = value

    def run_clients() -> tuple[str, str | None]:
        with rq.SyncExecutor(url, "sync", **options) as client:
            threads = [threading.Thread(target=work, args=(client, t)) for t in range(8)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            failing = client.activity("double").payload({"n": -1}).execute()
            try:
                client.result(failing, timeout=20)
            except rq.ActivityFailed as exc:
                error = exc.error
            else:  # pragma: no cover - the assertion below reports it
                error = None
            return client.backend_name, error

    try:
        async with engine:
            name, error = await asyncio.to_thread(run_clients)
    finally:
        await backend.close()
    assert name == url.split(":", 1)[0]
    assert results == {t * 100 + i: (t * 100 + i) * 2 for t in range(8) for i in range(10)}
    assert error is not None and "negative" in error


async def test_a_typed_payload_from_the_sync_client_reaches_the_typed_handler(
    target: tuple[str, dict[str, Any]],
) -> None:
    """Issue 27 item 5: ``client.activity(handler)`` encodes the Struct; the engine decodes it back into the type."""
    from tests.typed_payloads import ORDER_ID, sample_order, typed_engine

    url, options = target
    backend = await rq.connect(url, **options)
    received: list[Any] = []
    engine = typed_engine(backend, "sync-typed", received)

    def enqueue() -> Any:
        with rq.SyncExecutor(url, "sync-typed", **options) as client:
            activity_id = client.activity(engine.handler("order")).payload(sample_order()).execute()
            return client.result(activity_id, timeout=20)

    try:
        async with engine:
            result = await asyncio.to_thread(enqueue)
    finally:
        await backend.close()
    assert result == f"{ORDER_ID} 19.90"
    assert received == [sample_order()]
