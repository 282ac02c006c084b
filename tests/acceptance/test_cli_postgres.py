"""CLI acceptance tests against a real PostgreSQL server (a fresh database per test)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest

import runnerq_fast as rq
from examples.shop.app import ACTIVITIES_PER_ORDER, QUEUE, sample_order
from runnerq_fast.backends.postgres.sql import load_migrations
from tests.acceptance.helpers import HERE, REPO, WorkerProcess, eventually, run_cli, subprocess_env

pytestmark = pytest.mark.postgres

_UNFINISHED = ("pending", "scheduled", "processing", "retrying")


async def _stats(url: str, queue: str) -> rq.QueueStats:
    backend = await rq.connect(url)
    try:
        return await backend.stats(queue)
    finally:
        await backend.close()


def test_migrate_then_bad_input_stores_nothing(fresh_pg_url: str) -> None:
    migrated = run_cli("migrate", "--backend", fresh_pg_url)
    assert migrated.returncode == 0, migrated.stderr
    assert "migrations applied on postgresql" in migrated.stderr

    bad_json = run_cli("enqueue", "send_email", "--payload", "{'single': 'quotes'}", "--backend", fresh_pg_url)
    assert bad_json.returncode == 2
    assert "--payload is not valid JSON" in bad_json.stderr
    nul = run_cli("enqueue", "send_email", "--payload", '{"s": "a\\u0000b"}', "--backend", fresh_pg_url)
    assert nul.returncode == 2, nul.stderr
    assert "NUL" in nul.stderr
    assert asyncio.run(_stats(fresh_pg_url, "default")).total == 0

    ok = run_cli("enqueue", "send_email", "--payload", "{}", "--backend", fresh_pg_url, "--delay", "60")
    assert ok.returncode == 0, ok.stderr
    stats = run_cli("stats", "--json", "--backend", fresh_pg_url)
    assert stats.returncode == 0, stats.stderr
    counts = json.loads(stats.stdout)
    assert counts["total"] == 1 and counts["scheduled"] == 1


def test_shop_worker_runs_a_whole_order_and_exits_0_on_sigterm(
    fresh_pg_url: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    assert run_cli("migrate", "--backend", fresh_pg_url).returncode == 0
    worker = start_worker("examples.shop.app:engine", "--backend", fresh_pg_url, "--concurrency", "8")
    worker.wait_for_log("started on postgresql queue='shop'")

    payload = json.dumps(sample_order("ord-acc-1", review_delay_s=0.3))
    enq = run_cli("enqueue", "place_order", "--queue", QUEUE, "--payload", payload, "--backend", fresh_pg_url,
                  "--wait", "10")
    assert enq.returncode == 0, enq.stderr
    activity_id, result_line = enq.stdout.strip().splitlines()
    assert json.loads(result_line)["total_cents"] == 4900

    async def chain_done() -> rq.QueueStats | None:
        stats = await _stats(fresh_pg_url, QUEUE)
        assert stats.failed == stats.dead_letter == 0, stats
        done = stats.completed == ACTIVITIES_PER_ORDER and not any(getattr(stats, s) for s in _UNFINISHED)
        return stats if done else None

    asyncio.run(eventually(chain_done, 12, "the whole order chain to complete", interval=0.1))

    shown = run_cli("inspect", activity_id, "--json", "--backend", fresh_pg_url)
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["activity"]["status"] == "completed"
    assert isinstance(doc["activity"]["payload"], dict) and "order_id" in doc["activity"]["payload"]  # nested JSON
    assert doc["result"]["status"] == "completed"
    assert {"enqueued", "completed"} <= {e["event_type"] for e in doc["events"]}

    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0, worker.log()
    log = worker.log()
    assert "warehouse API busy" in log and "payment gateway timeout" in log  # the deterministic retries
    assert "Traceback" not in log


def test_sigkilled_worker_activity_reruns_elsewhere_after_the_lease_expires(
    fresh_pg_url: str, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    marker = tmp_path / "first-run"  # the first run creates it and hangs; the next returns at once

    async def enqueue() -> str:
        backend = await rq.connect(fresh_pg_url)
        try:
            ex = rq.ActivityExecutor(backend, "sleepy")
            fut = await ex.activity("nap").payload({"seconds": 60, "marker": str(marker)}).max_retries(3).execute()
            return fut.activity_id
        finally:
            await backend.close()

    activity_id = asyncio.run(enqueue())
    first = start_worker("sleepy_app:engine", "--backend", fresh_pg_url, "--lease-timeout", "0.5", cwd=HERE)

    async def snapshot() -> rq.ActivitySnapshot:
        backend = await rq.connect(fresh_pg_url)
        try:
            snap = await backend.get_activity(activity_id)
            assert snap is not None
            return snap
        finally:
            await backend.close()

    async def processing() -> bool:
        return (await snapshot()).status == "processing"

    asyncio.run(eventually(processing, 10, "the first worker to claim the activity"))
    time.sleep(0.6)  # past one lease: the heartbeat must be keeping it alive
    snap = asyncio.run(snapshot())
    assert snap.status == "processing" and snap.retry_count == 0, snap

    first.signal(signal.SIGKILL)
    assert first.wait(5) == -signal.SIGKILL

    async def lease_expired() -> bool:
        s = await snapshot()
        return s.lease_expires_at_ms is not None and s.lease_expires_at_ms < time.time() * 1000

    asyncio.run(eventually(lease_expired, 5, "the dead worker's lease to expire"))
    second = start_worker("sleepy_app:engine", "--backend", fresh_pg_url, cwd=HERE)

    async def result() -> rq.ActivityResult | None:
        backend = await rq.connect(fresh_pg_url)
        try:
            return await backend.wait_for_result(activity_id, 10)
        finally:
            await backend.close()

    res = asyncio.run(result())
    assert res is not None, second.log()
    assert res.status == "completed", res
    value = json.loads(res.data or "null")
    # not counted: it was claimed the ordinary way, so its worker may have died of something else; it
    # came back a suspect and ran alone (an expiry of that run would have counted)
    assert value["retry_count"] == 0
    assert value["pid"] == second.pid != first.pid

    events = [e.event_type for e in asyncio.run(_events(fresh_pg_url, activity_id))]
    assert "requeued" in events, events
    second.signal(signal.SIGTERM)
    assert second.wait(10) == 0, second.log()


async def _events(url: str, activity_id: str) -> list[rq.ActivityEvent]:
    backend = await rq.connect(url)
    try:
        return await backend.get_events(activity_id)
    finally:
        await backend.close()


def test_bench_on_postgres_writes_sane_json(fresh_pg_url: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    res = run_cli("bench", "--backend", fresh_pg_url, "-n", "1000", "--batch-size", "250", "--concurrency", "16",
                  "--idle-samples", "20", "--typed-samples", "10", "--due-samples", "4", "--output-json", str(out))
    assert res.returncode == 0, res.stderr
    data = json.loads(out.read_text())
    assert data["backend"] == "postgresql"
    assert data["completed"] == 1000 and data["concurrency"] == 16
    assert data["backend_stats"]["completed"] == 1000 + 20 + 10 + 4
    assert data["process_per_s"] > 0 and data["enqueue_per_s"] > 0
    assert data["idle_latency"]["samples"] == 20
    assert data["typed_idle_latency"]["samples"] == 10 and data["due_latency"]["samples"] == 4


def test_example_enqueuer_places_orders_and_one_worker_slot_finishes_them(
    fresh_pg_url: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    # more orders than worker slots: no step waits for another, so nothing can deadlock
    worker = start_worker("examples.shop.app:engine", "--backend", fresh_pg_url, "--concurrency", "1")
    worker.wait_for_log("started on postgresql queue='shop' workers=1")
    res = subprocess.run(
        [sys.executable, "-m", "examples.shop.enqueue_orders", "--backend", fresh_pg_url, "-n", "5",
         "--review-delay", "0.2", "--wait", "15"],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=30, check=False,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 10
    assert all(json.loads(line)["total_cents"] == 4900 for line in lines[5:])

    async def all_chains_done() -> bool:
        stats = await _stats(fresh_pg_url, QUEUE)
        assert stats.failed == stats.dead_letter == 0, stats
        return stats.completed == 5 * ACTIVITIES_PER_ORDER and not any(getattr(stats, s) for s in _UNFINISHED)

    asyncio.run(eventually(all_chains_done, 20, "every order chain to complete", interval=0.1))
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0, worker.log()


def test_looking_at_a_database_creates_nothing_in_it(fresh_pg_url: str) -> None:
    shown = run_cli("stats", "--backend", fresh_pg_url)
    assert shown.returncode == 1 and "runnerq-fast migrate" in shown.stderr, shown.stderr
    looked = run_cli("inspect", "0" * 32, "--backend", fresh_pg_url)
    assert looked.returncode == 1 and "runnerq-fast migrate" in looked.stderr, looked.stderr
    for command in (["stats", "--queue", "default"], ["queues"], ["workers"]):
        res = run_cli(*command, "--backend", fresh_pg_url)
        assert res.returncode == 1 and "Traceback" not in res.stderr, (command, res.stderr)
        assert "\nerror: no runnerq-fast schema" in "\n" + res.stderr and "runnerq-fast migrate" in res.stderr

    async def tables() -> int:
        conn = await asyncpg.connect(fresh_pg_url)
        try:
            n: int = await conn.fetchval("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'runnerq%'")
            return n
        finally:
            await conn.close()

    assert asyncio.run(tables()) == 0
    assert run_cli("migrate", "--backend", fresh_pg_url).returncode == 0
    assert run_cli("stats", "--backend", fresh_pg_url).returncode == 0


async def _pg_rows(url: str) -> list[object]:
    """Every table of the database with its rows, and its indexes, to compare before and after."""
    conn = await asyncpg.connect(url)
    try:
        tables = [r[0] for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        state: list[object] = [sorted(tables)]
        for table in sorted(tables):  # names from the catalog
            state.append(sorted(repr(tuple(r)) for r in await conn.fetch(f'SELECT * FROM "{table}"')))
        state.append(sorted(tuple(r) for r in await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'")))
        return state
    finally:
        await conn.close()


async def _record_migration(url: str, version: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("INSERT INTO runnerq_migrations (version, name) VALUES ($1, 'from_the_future')", version)
    finally:
        await conn.close()


def test_migrate_says_what_it_applied_then_up_to_date_then_warns_about_a_newer_release(fresh_pg_url: str) -> None:
    versions = [m.version for m in load_migrations()]
    first = run_cli("migrate", "--backend", fresh_pg_url)
    assert first.returncode == 0, first.stderr
    assert f"migrations applied on postgresql backend {fresh_pg_url}: 0001, " in first.stderr
    assert first.stderr.rstrip().endswith(f", {versions[-1]:04d}") and "up to date" not in first.stderr

    second = run_cli("migrate", "--backend", fresh_pg_url)
    assert second.returncode == 0, second.stderr
    assert f"already up to date: nothing to migrate on postgresql backend {fresh_pg_url}" in second.stderr
    assert f"up to {versions[-1]:04d}" in second.stderr
    assert "migrations applied" not in second.stderr and "newer runnerq-fast" not in second.stderr

    future = versions[-1] + 1
    asyncio.run(_record_migration(fresh_pg_url, future))
    before = asyncio.run(_pg_rows(fresh_pg_url))
    third = run_cli("migrate", "--backend", fresh_pg_url)
    assert third.returncode == 0, third.stderr
    assert "already up to date" in third.stderr
    assert f"\nwarning: the store holds migration {future:04d}, unknown to this runnerq-fast release" in third.stderr
    for fact in (f"up to {versions[-1]:04d}", "a newer runnerq-fast migrated it", "may not read or write it correctly",
                 "upgrade runnerq-fast", "roll back only to releases that know"):
        assert fact in third.stderr, fact
    assert third.stderr.count("newer runnerq-fast") == 1  # the command's own line, not the log's too
    assert asyncio.run(_pg_rows(fresh_pg_url)) == before  # nothing stored changed

    enqueued = run_cli("enqueue", "t", "--payload", "{}", "--backend", fresh_pg_url)  # opens it with the log's
    assert enqueued.returncode == 0, enqueued.stderr
    assert "WARNING" in enqueued.stderr and f"{future:04d}" in enqueued.stderr
    assert "newer runnerq-fast" in enqueued.stderr


def test_cli_commands_print_no_autovacuum_warning(fresh_pg_url: str) -> None:
    """Issue 26, item 11: the shared server runs with autovacuum off; only a worker's start warns of it."""
    assert run_cli("migrate", "--backend", fresh_pg_url).returncode == 0
    for args in (("stats",), ("queues",), ("enqueue", "t", "--payload", "{}")):
        done = run_cli(*args, "--backend", fresh_pg_url)
        assert done.returncode == 0, done.stderr
        assert "autovacuum" not in done.stderr + done.stdout, (args, done.stderr)
