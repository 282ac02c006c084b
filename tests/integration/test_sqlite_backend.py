"""SQLite-specific behaviour: URLs, bad files, read-only opens, migrations, several processes on one file.

Every test uses a fresh file under ``tmp_path``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import runnerq_fast as rq
from runnerq_fast.backends import rowcheck
from runnerq_fast.backends.sqlfiles import load_migrations, load_queries
from runnerq_fast.backends.sqlite import SqliteBackend, apply_migrations, sqlite_path
from runnerq_fast.backends.sqlite.backend import Q, _plain_row, _split_script
from runnerq_fast.errors import BackendError, ConfigError
from runnerq_fast.models import Ack, AckOutcome, ActivityFilter
from tests.conformance import new

REPO = Path(__file__).resolve().parents[2]


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


# --------------------------------------------------------------------- URLs
@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///relative.db", "relative.db"),
        ("sqlite:///dir/sub/x.db", "dir/sub/x.db"),
        ("sqlite:////abs/path.db", "/abs/path.db"),
        ("sqlite:///with%20space.db", "with space.db"),
        ("SQLITE:///upper.db", "upper.db"),
    ],
)
def test_url_forms_follow_sqlalchemy(url: str, path: str) -> None:
    assert sqlite_path(url) == path


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite://", "names no file"),
        ("sqlite:///", "names no file"),
        ("sqlite://host/x.db", "names a host"),
        ("sqlite:///:memory:", "memory://"),
        ("sqlite:///dir/", "names no file"),
        ("sqlite:/x.db", "use sqlite:///"),
        ("sqlite:x.db", "use sqlite:///"),
        ("SQLITE:/abs/x.db", "use sqlite:///"),
        ("sqlite:///x%00y.db", "NUL"),  # sqlite3 raised ValueError (exit 1) where stats said "no database" (exit 2)
    ],
)
def test_bad_urls_are_config_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        sqlite_path(url)


async def test_relative_url_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    backend = await rq.connect("sqlite:///here.db")
    try:
        assert isinstance(backend, SqliteBackend) and backend.name == "sqlite"
        await backend.enqueue("q", [new("t")])
    finally:
        await backend.close()
    assert (tmp_path / "here.db").is_file()


async def test_unknown_url_option_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown SQLite URL option"):
        await rq.connect(url_of(tmp_path / "x.db") + "?journal=delete")
    assert not (tmp_path / "x.db").exists()


async def test_synchronous_option_is_applied(tmp_path: Path) -> None:
    backend = await SqliteBackend.open(url_of(tmp_path / "x.db") + "?synchronous=normal")
    try:
        level = await backend._call(backend._fetchone, "PRAGMA synchronous", ())
        assert level[0] == 1  # NORMAL
    finally:
        await backend.close()
    with pytest.raises(ConfigError, match="synchronous"):
        await SqliteBackend.open(url_of(tmp_path / "y.db") + "?synchronous=sometimes")


# ---------------------------------------------------------------- bad files
@pytest.mark.parametrize("read_only", [False, True])
async def test_a_path_that_is_not_a_regular_file_is_a_clear_error(tmp_path: Path, read_only: bool) -> None:
    fifo = tmp_path / "pipe.db"
    os.mkfifo(fifo)  # opening a FIFO would block the connection thread for good
    for target in (tmp_path, fifo):
        with pytest.raises(ConfigError, match="not a regular file"):
            await asyncio.wait_for(rq.connect(url_of(target), read_only=read_only), 10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.db"]


async def test_missing_directory_is_a_clear_error_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        await rq.connect(url_of(tmp_path / "nonexistent" / "dir" / "x.db"))
    assert not (tmp_path / "nonexistent").exists()


async def test_a_file_that_is_not_a_database_is_left_untouched(tmp_path: Path) -> None:
    target = tmp_path / "notes.db"
    content = b"these are my precious notes, not a database\n" * 200
    target.write_bytes(content)
    with pytest.raises(ConfigError, match="not a SQLite database"):
        await rq.connect(url_of(target))
    assert target.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


@pytest.mark.parametrize("read_only", [False, True])
async def test_a_database_another_process_locks_is_not_called_not_a_database(tmp_path: Path, read_only: bool) -> None:
    # a readable database whose header read fails (here SQLITE_BUSY: another connection holds an
    # exclusive lock; a read-only directory without the WAL index gives SQLITE_READONLY_DIRECTORY) was
    # reported as "not a SQLite database": only a file SQLite says is none (NOTADB, CORRUPT) is that
    target = tmp_path / "busy.db"
    holder = sqlite3.connect(target, isolation_level=None)
    try:
        holder.execute("CREATE TABLE mine (x)")
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(BackendError, match=r"cannot read SQLite database .*database is locked") as info:
            await SqliteBackend.open(url_of(target), read_only=read_only, busy_timeout=0.05)
        assert "not a SQLite database" not in str(info.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert sqlite3.connect(target).execute("SELECT count(*) FROM sqlite_master").fetchone() == (1,)


async def test_read_only_open_never_creates_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no SQLite database"):
        await rq.connect(url_of(tmp_path / "absent.db"), read_only=True)
    assert list(tmp_path.iterdir()) == []


async def test_read_only_open_of_a_database_without_schema_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "other.db"
    conn = sqlite3.connect(target)
    conn.execute("CREATE TABLE mine (x)")
    conn.commit()
    conn.close()
    with pytest.raises(ConfigError, match="no runnerq-fast schema"):
        await rq.connect(url_of(target), read_only=True)
    conn = sqlite3.connect(target)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    conn.close()
    assert tables == ["mine"]


async def test_read_only_open_reads_and_refuses_writes(tmp_path: Path) -> None:
    target = tmp_path / "q.db"
    writer = await SqliteBackend.open(url_of(target))
    (res,) = await writer.enqueue("q", [new("t")])
    await writer.close()
    reader = await SqliteBackend.open(url_of(target), read_only=True)
    try:
        assert (await reader.stats("q")).pending == 1
        snap = await reader.get_activity(res.activity_id)
        assert snap is not None and snap.status == "pending"
        with pytest.raises(BackendError, match="read-only"):
            await reader.enqueue("q", [new("t")])
    finally:
        await reader.close()


async def test_closed_backend_refuses_calls(tmp_path: Path) -> None:
    backend = await SqliteBackend.open(url_of(tmp_path / "x.db"))
    await backend.close()
    await backend.close()  # idempotent
    with pytest.raises(BackendError, match="closed"):
        await backend.stats("q")


# --------------------------------------------------------------- migrations
def test_migration_script_splits_into_its_statements() -> None:
    m, m2, m3 = load_migrations("runnerq_fast.backends.sqlite")[:3]
    statements = _split_script(m.sql)
    assert all(sqlite3.complete_statement(s) for s in statements)
    kinds = [s.split("(")[0].split()[:3] for s in statements]
    assert ["CREATE", "TABLE", "runnerq_activities"] in kinds and len(statements) == 7
    later = [s.split("(")[0].split()[:3] for s in _split_script(m2.sql)]
    assert later.count(["ALTER", "TABLE", "runnerq_activities"]) == 2 and len(later) == 5
    retention = [s.split("(")[0].split()[:3] for s in _split_script(m3.sql)]
    assert retention == [["CREATE", "INDEX", "runnerq_activities_finished_idx"],
                         ["CREATE", "INDEX", "runnerq_events_at_idx"], ["CREATE", "TABLE", "runnerq_holds"]]


async def test_a_file_at_migration_1_is_upgraded_and_keeps_its_rows(tmp_path: Path) -> None:
    """A database written before migration 0002 (no parent_id, no listing indexes) opens, upgrades, lists."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    m1 = load_migrations("runnerq_fast.backends.sqlite")[0]
    conn.execute("BEGIN")
    conn.execute("CREATE TABLE runnerq_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                 "applied_at INTEGER NOT NULL)")
    for statement in _split_script(m1.sql):
        conn.execute(statement)
    conn.execute("INSERT INTO runnerq_migrations VALUES (1, 'initial', 0)")
    conn.execute("INSERT INTO runnerq_activities (id, queue_name, activity_type, status, priority, max_retries, "
                 "timeout_ms, payload, metadata, created_at, ready_at) VALUES ('a1', 'q', 't', 'failed', 2, 3, 0, "
                 "'{}', '{}', 1000, 1000)")
    conn.execute("COMMIT")
    conn.close()
    b = await SqliteBackend.open(f"sqlite:///{path}")
    try:
        snap = await b.get_activity("a1")
        assert snap is not None and snap.status == "failed" and snap.parent_id is None
        assert (await b.stats("q")).failed == 1
        page = await b.query_activities("q", ActivityFilter(statuses=("failed",)))
        assert [s.id for s in page.items] == ["a1"]
        assert (await b.retry_activities("q", ActivityFilter(ids=("a1",)))).changed == ["a1"]
    finally:
        await b.close()


def test_split_script_refuses_an_unterminated_statement() -> None:
    with pytest.raises(ValueError, match="inside a statement"):
        _split_script("-- header\nCREATE TABLE a (x);\nCREATE TABLE b (y)\n")


async def test_open_uses_wal_and_migrates_once(tmp_path: Path) -> None:
    target = tmp_path / "x.db"
    first, second = await asyncio.gather(
        SqliteBackend.open(url_of(target)), SqliteBackend.open(url_of(target))
    )
    await first.close()
    await second.close()
    conn = sqlite3.connect(target)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        versions = [r[0] for r in conn.execute("SELECT version FROM runnerq_migrations")]
        assert versions == [m.version for m in load_migrations("runnerq_fast.backends.sqlite")]
        conn.isolation_level = None
        assert apply_migrations(conn) == []
    finally:
        conn.close()


def _dump(path: Path) -> list[str]:
    """The whole file as SQL (schema and rows), to compare before and after."""
    conn = sqlite3.connect(path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


async def test_a_file_a_newer_release_migrated_opens_with_one_warning_and_is_left_as_it_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Versions this release does not ship are warned about at open, never refused (a rollback must work)."""
    target = tmp_path / "x.db"
    backend = await SqliteBackend.open(url_of(target))
    [enqueued] = await backend.enqueue("q", [new()])
    await backend.close()
    future = max(m.version for m in load_migrations("runnerq_fast.backends.sqlite")) + 1
    conn = sqlite3.connect(target)
    with conn:
        conn.execute("INSERT INTO runnerq_migrations VALUES (?, 'from_the_future', 0)", (future,))
    conn.close()
    before = _dump(target)

    with caplog.at_level(logging.INFO, "runnerq_fast"):
        backend = await SqliteBackend.open(url_of(target))
    try:
        [record] = [r for r in caplog.records if r.levelno >= logging.WARNING]
        message = record.getMessage()
        assert str(target) in message and f"migration {future:04d}," in message, message
        assert f"up to {future - 1:04d}" in message and "newer runnerq-fast" in message, message
        assert "may not read or write it correctly" in message and "upgrade runnerq-fast" in message, message
        assert [r for r in caplog.records if "applied" in r.getMessage()] == []
        # usable all the same
        snapshot = await backend.get_activity(enqueued.activity_id)
        assert snapshot is not None and snapshot.status == "pending"
        assert (await backend.stats("q")).pending == 1
        caplog.clear()
        with caplog.at_level(logging.INFO, "runnerq_fast"):
            report = await backend.migrate()
        assert report == rq.MigrationReport(applied=(), latest=future - 1, unknown=(future,))
        assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1
    finally:
        await backend.close()
    assert _dump(target) == before  # the warning path changed nothing stored

    conn = sqlite3.connect(target, isolation_level=None)
    try:
        caplog.clear()
        with caplog.at_level(logging.INFO, "runnerq_fast"):
            assert apply_migrations(conn) == []
        [record] = caplog.records
        assert record.levelno == logging.WARNING and f"{future:04d}" in record.getMessage()
    finally:
        conn.close()
    assert _dump(target) == before


async def test_migrate_reports_what_it_applied_then_nothing(tmp_path: Path) -> None:
    target = tmp_path / "x.db"
    versions = tuple(m.version for m in load_migrations("runnerq_fast.backends.sqlite"))
    backend = await SqliteBackend.open(url_of(target), migrate=False)
    try:
        assert await backend.migrate() == rq.MigrationReport(applied=versions, latest=versions[-1])
        assert await backend.migrate() == rq.MigrationReport(latest=versions[-1])
    finally:
        await backend.close()


# ------------------------------------------------------- several connections
async def test_two_connections_never_claim_the_same_activity(tmp_path: Path) -> None:
    target = tmp_path / "x.db"
    a = await SqliteBackend.open(url_of(target))
    b = await SqliteBackend.open(url_of(target))
    try:
        await a.enqueue("q", [new("t") for _ in range(600)])

        async def drain(backend: SqliteBackend, name: str) -> list[str]:
            got: list[str] = []
            while batch := await backend.claim("q", name, 7, None, 30_000):
                got.extend(x.id for x in batch)
            return got

        left, right = await asyncio.gather(drain(a, "a"), drain(b, "b"))
        assert len(left) + len(right) == 600
        assert len(set(left) | set(right)) == 600
    finally:
        await a.close()
        await b.close()


async def test_another_connection_wakes_work_and_result_waiters(tmp_path: Path) -> None:
    target = tmp_path / "x.db"
    waiter = await SqliteBackend.open(url_of(target))
    other = await SqliteBackend.open(url_of(target))
    try:
        await waiter.claim("q", "w", 1, None, 1000)  # clears any pending wakeup
        told = asyncio.ensure_future(waiter.wait_for_work("q", 30.0))
        await asyncio.sleep(0.05)
        assert not told.done()
        (res,) = await other.enqueue("q", [new("t")])
        await asyncio.wait_for(told, 5.0)  # woken by data_version, long before the 30 s timeout
        result = asyncio.ensure_future(waiter.wait_for_result(res.activity_id, 30.0))
        (c,) = await other.claim("q", "w", 1, None, 5000)
        await asyncio.sleep(0.05)
        assert not result.done()
        await other.ack("q", [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, b'"done"')])
        got = await asyncio.wait_for(result, 5.0)
        assert got is not None and got.status == "completed" and got.data == '"done"'
    finally:
        await waiter.close()
        await other.close()


async def test_instances_in_one_process_wake_each_other_without_polling(tmp_path: Path) -> None:
    target = tmp_path / "x.db"
    waiter = await SqliteBackend.open(url_of(target), poll_interval=60.0)  # the poll would take a minute
    other = await SqliteBackend.open(url_of(target), poll_interval=60.0)
    try:
        await waiter.claim("q", "w", 1, None, 1000)
        told = asyncio.ensure_future(waiter.wait_for_work("q", 30.0))
        await asyncio.sleep(0.05)
        (res,) = await other.enqueue("q", [new("t")])
        await asyncio.wait_for(told, 5.0)
        result = asyncio.ensure_future(waiter.wait_for_result(res.activity_id, 30.0))
        (c,) = await other.claim("q", "w", 1, None, 5000)
        await asyncio.sleep(0.05)
        await other.ack("q", [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, b"1")])
        got = await asyncio.wait_for(result, 5.0)
        assert got is not None and got.status == "completed"
    finally:
        await waiter.close()
        await other.close()


async def test_data_version_is_polled_only_while_someone_waits(tmp_path: Path) -> None:
    backend = await SqliteBackend.open(url_of(tmp_path / "x.db"), poll_interval=0.005)
    try:
        await backend.enqueue("q", [new("t")])
        await backend.claim("q", "w", 10, None, 5000)
        await backend.wait_for_work("q", 0.0)  # starts the watcher, waits (almost) not at all
        await asyncio.sleep(0.01)
        before = backend.version_checks
        await asyncio.sleep(0.1)  # nobody waits: about 20 polls would happen here otherwise
        assert backend.version_checks == before
        await backend.wait_for_work("q", 0.1)
        assert backend.version_checks > before
    finally:
        await backend.close()


async def test_event_stream_sees_events_written_by_another_connection(tmp_path: Path) -> None:
    target = tmp_path / "x.db"
    reader = await SqliteBackend.open(url_of(target), stream_poll_interval=30.0)
    other = await SqliteBackend.open(url_of(target))
    try:
        seen: list[str] = []

        async def consume() -> None:
            async for ev in reader.event_stream("q"):
                seen.append(ev.event_type)
                return

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.1)
        await other.enqueue("q", [new("t")])
        await asyncio.wait_for(task, 5.0)
        assert seen == ["enqueued"]
    finally:
        await reader.close()
        await other.close()


# ----------------------------------------------------------- two processes
_WORKER = textwrap.dedent(
    """
    import asyncio, json, sys
    import runnerq_fast as rq
    from runnerq_fast.engine import run_with_uvloop

    url, out, total = sys.argv[1], sys.argv[2], int(sys.argv[3])

    async def main() -> None:
        backend = await rq.connect(url)
        engine = rq.WorkerEngine(backend, queue_name="multi", max_workers=8, claim_batch_size=8,
                                 poll_interval=0.05, ack_flush_interval=0.002)
        seen = []

        @engine.activity("count")
        async def count(payload, ctx):
            seen.append(payload)
            await asyncio.sleep(0.005)

        async with engine:
            print("ready", flush=True)
            insp = engine.inspector()
            while (await insp.stats()).completed < total:
                await asyncio.sleep(0.05)
        await backend.close()
        with open(out, "w") as fh:
            json.dump(seen, fh)

    run_with_uvloop(main())
    """
)


def test_two_processes_drain_one_file_exactly_once(tmp_path: Path) -> None:
    target = tmp_path / "shared.db"
    url = url_of(target)
    total = 3000
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("RUNNERQ_BACKEND", None)
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    procs = []
    for i in range(2):
        with logs[i].open("w") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-c", _WORKER, url, str(tmp_path / f"out{i}.json"), str(total)],
                stdout=subprocess.PIPE, stderr=log, text=True, env=env,
            ))
    try:
        for p, log_path in zip(procs, logs, strict=True):
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "ready", log_path.read_text()

        async def enqueue() -> None:
            backend = await rq.connect(url)
            try:
                ex = rq.ActivityExecutor(backend, "multi")
                for start in range(0, total, 250):
                    await ex.enqueue_many([("count", i) for i in range(start, start + 250)])
            finally:
                await backend.close()

        asyncio.run(enqueue())
        deadline = time.monotonic() + 120
        for p, log_path in zip(procs, logs, strict=True):
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
            assert p.returncode == 0, log_path.read_text()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()
    runs = [json.loads((tmp_path / f"out{i}.json").read_text()) for i in range(2)]
    assert all(runs), "each process should have run some of the activities"
    combined = sorted(runs[0] + runs[1])
    assert combined == list(range(total))  # every activity exactly once


# ------------------------------------------------------------ SQL and crashes
async def test_every_query_prepares_against_the_migrated_schema(tmp_path: Path) -> None:
    backend = await SqliteBackend.open(url_of(tmp_path / "x.db"))
    await backend.close()
    queries = load_queries("runnerq_fast.backends.sqlite")
    conn = sqlite3.connect(tmp_path / "x.db")
    try:
        for sql in queries.values():
            conn.execute("EXPLAIN " + sql, _nulls(sql))
    finally:
        conn.close()
    assert {"claim", "ack", "insert_activity", "insert_event", "events_after"} <= set(queries)


def _nulls(sql: str) -> list[None]:
    """One NULL per numbered parameter of ``sql``."""
    return [None] * max((int(n) for n in re.findall(r"\?(\d+)", sql)), default=0)


_CRASHY = textwrap.dedent(
    """
    import asyncio, os, sys
    import runnerq_fast as rq
    from runnerq_fast.engine import run_with_uvloop

    url, total, hang = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "hang"

    async def main() -> None:
        backend = await rq.connect(url)
        engine = rq.WorkerEngine(backend, queue_name="crash", max_workers=8, lease_timeout=0.5,
                                 heartbeat_interval=0.1, reaper_interval=0.1, poll_interval=0.05)

        @engine.activity("work")
        async def work(payload, ctx):
            if hang:
                print("running", flush=True)
                await asyncio.sleep(3600)
            return payload

        async with engine:
            insp = engine.inspector()
            while (await insp.stats()).completed < total:
                await asyncio.sleep(0.05)
        await backend.close()

    run_with_uvloop(main())
    """
)


def test_a_killed_worker_loses_nothing(tmp_path: Path) -> None:
    url = url_of(tmp_path / "crash.db")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("RUNNERQ_BACKEND", None)
    total = 20

    async def enqueue() -> list[str]:
        backend = await rq.connect(url)
        try:
            return await rq.ActivityExecutor(backend, "crash").enqueue_many([("work", i) for i in range(total)])
        finally:
            await backend.close()

    ids = asyncio.run(enqueue())
    with (tmp_path / "victim.log").open("w") as log:
        victim = subprocess.Popen([sys.executable, "-c", _CRASHY, url, str(total), "hang"],
                                  stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    try:
        assert victim.stdout is not None
        assert victim.stdout.readline().strip() == "running", (tmp_path / "victim.log").read_text()
        victim.kill()  # SIGKILL: no graceful stop, its leases simply expire
        victim.wait()
    finally:
        if victim.stdout is not None:
            victim.stdout.close()
    with (tmp_path / "rescuer.log").open("w") as log:
        rescuer = subprocess.run([sys.executable, "-c", _CRASHY, url, str(total), "work"],
                                 stderr=log, env=env, timeout=60, check=False)
    assert rescuer.returncode == 0, (tmp_path / "rescuer.log").read_text()

    async def check() -> list[int]:
        backend = await rq.connect(url, read_only=True)
        try:
            assert (await backend.stats("crash")).completed == total
            retried = []
            for aid in ids:
                snap = await backend.get_activity(aid)
                assert snap is not None and snap.status == "completed"
                retried.append(snap.retry_count)
            return retried
        finally:
            await backend.close()

    retried = asyncio.run(check())
    # the victim held up to 8 activities, claimed together, when it died: none is known to be the
    # cause, so no attempt is counted (issue 11 item 12); each was run alone by the rescuer instead
    assert retried == [0] * total


@pytest.mark.parametrize(
    ("name", "params", "index"),
    [
        ("scan_status_desc", ("q", "completed", -1, 2**62, 2**62, ""), "runnerq_activities_status_created_idx"),
        ("scan_status_asc", ("q", "pending", 5, 2**62, 7, "ab"), "runnerq_activities_status_created_idx"),
        ("scan_type_desc", ("q", "failed", -1, 2**62, 2**62, "", "t"), "runnerq_activities_type_created_idx"),
        ("scan_type_asc", ("q", "failed", -1, 9, -1, "", "t"), "runnerq_activities_type_created_idx"),
        ("scan_parent_desc", ("q", "p", -1, 2**62, 2**62, ""), "runnerq_activities_parent_idx"),
        ("count_status", ("q", "completed", -1, 2**62, 10_001), "runnerq_activities_status_created_idx"),
        ("count_type", ("q", "completed", -1, 2**62, 10_001, "t"), "runnerq_activities_type_created_idx"),
        ("ready_head", ("q", 4, 2**62), "runnerq_activities_dequeue_idx"),
        # migration 0010: processing rows are left out of the two listing indexes and have their own
        ("scan_processing_desc", ("q", "processing", -1, 2**62, 2**62, "", "t"), "runnerq_activities_processing_idx"),
        ("scan_processing_asc", ("q", "processing", -1, 9, -1, "", "t"), "runnerq_activities_processing_idx"),
        ("processing_types", ("q",), "runnerq_activities_processing_idx"),
        ("count_processing", ("q", "processing", -1, 2**62, 10_001), "runnerq_activities_processing_idx"),
        ("count_processing_type", ("q", "processing", -1, 2**62, 10_001, "t"), "runnerq_activities_processing_idx"),
        ("stats", ("q",), "runnerq_activities_status_created_idx"),
        ("stats", ("q",), "runnerq_activities_processing_idx"),
        ("counts_by_type", ("q",), "runnerq_activities_type_created_idx"),
        ("counts_by_type", ("q",), "runnerq_activities_processing_idx"),
        ("queue_names", (), "runnerq_activities_status_created_idx"),
    ],
)
def test_listing_statements_search_their_index(tmp_path: Path, name: str, params: tuple[Any, ...], index: str) -> None:
    """Every listing and count statement is an index SEARCH (a range), never a SCAN of the table."""
    conn = sqlite3.connect(tmp_path / "plan.db", isolation_level=None)
    try:
        apply_migrations(conn)
        plan = " | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + Q[name], params))
    finally:
        conn.close()
    assert f"SEARCH runnerq_activities USING COVERING INDEX {index}" in plan or (
        f"SEARCH runnerq_activities USING INDEX {index}" in plan
    ), plan
    assert "SCAN runnerq_activities" not in plan, plan
    if name.startswith("scan_"):
        assert "TEMP B-TREE" not in plan, plan  # rows come in listing order from the index, never sorted
    if name.startswith("count") or name in ("stats", "processing_types", "queue_names"):
        assert "USING INDEX" not in plan and "TEMP B-TREE" not in plan, plan  # index entries alone, no row read


def test_no_status_test_of_the_table_is_an_in_list_of_three_or_more() -> None:
    """A CHECK or partial-index ``status IN (a, b, c)`` is a temporary b-tree built for every row written.

    The status CHECK and the predicate of each partial index are evaluated
    for every UPDATE that sets status (each claim and ack): written as ORs of
    equalities they are plain comparisons (migration 0009). Two-value lists
    are coded as comparisons by SQLite itself.
    """
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        apply_migrations(conn)
        schema = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE tbl_name = 'runnerq_activities' AND sql IS NOT NULL"
        ).fetchall()
        ack_program = conn.execute("EXPLAIN " + Q["ack"], (1, "null", None, 0, 1, "a", "t", None)).fetchall()
    finally:
        conn.close()
    assert any(" WHERE " in sql for _, sql in schema)
    for name, sql in schema:
        for values in re.findall(r"\bIN\s*\(([^)]*)\)", sql, flags=re.IGNORECASE):
            assert values.count(",") < 2, (name, sql)
    # the ack runs once per acknowledged row: before 0009 it built eight (the CHECK's, seven predicates')
    assert not [op for op in ack_program if op[1] == "OpenEphemeral"], ack_program


async def test_a_file_at_migration_7_is_rebuilt_by_0009_with_its_rows_and_indexes(tmp_path: Path) -> None:
    """0009 rebuilds runnerq_activities: every row, column and seq is kept, every index is back."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(Q["create_migrations_table"])
    for m in load_migrations("runnerq_fast.backends.sqlite"):
        if m.version < 9:
            for statement in _split_script(m.sql):
                conn.execute(statement)
            conn.execute(Q["record_migration"], (m.version, m.name, 0))
    cols = ("id, queue_name, activity_type, status, priority, max_retries, timeout_ms, payload, metadata, "
            "created_at, ready_at")
    conn.execute(f"INSERT INTO runnerq_activities (seq, {cols}) VALUES (7, 'a1', 'q', 't', 'failed', 2, 3, 0, "
                 "'{}', '{}', 1000, 1000)")
    conn.execute(f"INSERT INTO runnerq_activities (seq, {cols}, suspect, retry_count, last_error) VALUES "
                 "(9, 'a2', 'q', 't', 'pending', 3, 3, 0, '[1]', '{\"k\": \"v\"}', 2000, 2000, 1, 1, 'e')")
    conn.execute(f"INSERT INTO runnerq_activities (seq, {cols}, claim_token, lease_expires_at, worker_id, "
                 "cancel_requested_at, parent_id) VALUES (12, 'a3', 'q', 't', 'processing', 2, 3, 0, '{}', '{}', "
                 "3000, 3000, 'tok', 5, 'w', 4, 'a1')")
    before = conn.execute("SELECT * FROM runnerq_activities ORDER BY seq").fetchall()
    indexes = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' "
                                                "AND tbl_name = 'runnerq_activities'"))
    conn.close()
    b = await SqliteBackend.open(f"sqlite:///{path}")
    try:
        # the reaper finds a3 (processing_idx carries the lease since 0011): its lease (5 ms) ran out,
        # and an operator had asked to cancel it
        expired = await b.requeue_expired("q", 10)
        assert expired.cancelled == ["a3"] and not expired.requeued
        claimed = await b.claim_suspect("q", "w", None, 30_000)  # the suspect_idx: a2
        assert [c.id for c in claimed] == ["a2"] and claimed[0].payload == "[1]"
        assert (await b.stats("q")).failed == 1
    finally:
        await b.close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        after = conn.execute("SELECT * FROM runnerq_activities ORDER BY seq").fetchall()
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # every index is back (and 0010's processing_idx is added; 0011 drops lease_idx, which it serves)
        assert sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' "
                                                 "AND tbl_name = 'runnerq_activities'")) == sorted(
            [*(i for i in indexes if i != "runnerq_activities_lease_idx"), "runnerq_activities_processing_idx"])
        assert 9 in [r[0] for r in conn.execute("SELECT version FROM runnerq_migrations")]
    finally:
        conn.close()
    assert [r[0] for r in after] == [r[0] for r in before] == [7, 9, 12]
    assert after[0][: len(before[0])] == before[0]  # a1, untouched since
    assert set(after[0][len(before[0]):]) <= {None}  # the columns of later migrations (0012 traceback, 0013 progress)


@pytest.mark.parametrize(
    ("name", "params", "index"),
    [
        ("claim", ("q", 1, None, 10), "runnerq_activities_dequeue_idx"),
        ("claim", ("q", 1, '["a"]', 10), "runnerq_activities_dequeue_idx"),
        ("claim_suspect", ("q", 1, None, 1), "runnerq_activities_suspect_idx"),
        ("prune_pick", ("q", "completed", 5, 10), "runnerq_activities_finished_idx"),
    ],
)
def test_claims_and_prunes_search_their_partial_index(
    tmp_path: Path, name: str, params: tuple[Any, ...], index: str
) -> None:
    """A query uses a partial index only if its WHERE spells the index's predicate (migration 0009)."""
    conn = sqlite3.connect(tmp_path / "plan.db", isolation_level=None)
    try:
        apply_migrations(conn)
        plan = " | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + Q[name], params))
    finally:
        conn.close()
    assert f"USING INDEX {index}" in plan or f"USING COVERING INDEX {index}" in plan, plan
    assert "SCAN runnerq_activities" not in plan, plan


_CLAIM_COLUMN_VALUES = (1, 2**40, "t", "{}", b"{}", 1.5, None, "")


@pytest.mark.parametrize("column", range(10))
@pytest.mark.parametrize("value", _CLAIM_COLUMN_VALUES)
def test_a_claimed_row_passes_the_quick_check_only_if_rowcheck_finds_nothing(column: int, value: Any) -> None:
    """``_plain_row`` (the claim's check of each row) never lets through a row ``rowcheck.reason`` refuses."""
    row: list[Any] = ["id", "t", "{}", 2, 0, 3, 1000, "{}", 5, 6, 7]
    assert _plain_row(row)
    row[column] = value
    fields = {"activity_type": row[1], "payload": row[2], "priority": row[3], "retry_count": row[4],
              "max_retries": row[5], "timeout_ms": row[6], "metadata": row[7], "created_at_ms": row[8],
              "ready_at_ms": row[9]}
    if _plain_row(row):
        assert rowcheck.reason(fields) is None


async def _pages(b: SqliteBackend, flt: ActivityFilter, newest_first: bool) -> list[str]:
    out: list[str] = []
    cursor = None
    while True:
        page = await b.query_activities("q", flt, limit=3, cursor=cursor, newest_first=newest_first)
        out += [s.id for s in page.items]
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


async def test_processing_rows_are_listed_and_counted_from_their_own_index(tmp_path: Path) -> None:
    """Migration 0010: the listing indexes leave processing rows out; they are listed, counted and summarised alike.

    Processing rows of two types between pending and finished ones, paged both ways with and without a
    type filter, counted per range, and a queue that holds nothing but processing rows.
    """
    b = await SqliteBackend.open(url_of(tmp_path / "p.db"))
    try:
        ids: dict[str, list[str]] = {"a": [], "b": []}
        for i in range(8):
            t = "a" if i % 3 else "b"
            (r,) = await b.enqueue("q", [new(t)])
            ids[t].append(r.activity_id)
            await asyncio.sleep(0.002)  # distinct creation times
        held = await b.claim("q", "w", 5, None, 30_000)  # the five oldest, of both types
        await b.ack("q", [Ack(c.id, c.claim_token, AckOutcome.COMPLETED) for c in held[:1]])
        processing = sorted((c for c in held[1:]), key=lambda c: c.created_at_ms)
        proc_ids = [c.id for c in processing]
        every = ids["b"] + ids["a"]
        created = {i: (await b.get_activity(i)).created_at_ms for i in every}  # type: ignore[union-attr]
        in_order = sorted(every, key=lambda i: (created[i], i))
        assert len(proc_ids) == 4 and len({c.activity_type for c in processing}) == 2

        only = ActivityFilter(statuses=("processing",))
        assert await _pages(b, only, False) == sorted(proc_ids, key=lambda i: (created[i], i))
        assert await _pages(b, only, True) == sorted(proc_ids, key=lambda i: (created[i], i), reverse=True)
        typed = ActivityFilter(statuses=("processing", "pending"), activity_types=("a",))
        want = [i for i in in_order if i in ids["a"] and i != held[0].id]
        assert await _pages(b, typed, False) == want
        assert await _pages(b, ActivityFilter(), True) == in_order[::-1]
        assert (await b.count_activities("q", only)).count == 4
        assert (await b.count_activities("q", ActivityFilter(statuses=("processing",), activity_types=("b",)))).count \
            == sum(1 for c in processing if c.activity_type == "b")
        first = processing[0].created_at_ms
        assert (await b.count_activities("q", ActivityFilter(statuses=("processing",), created_after_ms=first + 1))
                ).count == sum(1 for c in processing if c.created_at_ms > first)
        stats = await b.stats("q")
        assert (stats.processing, stats.pending, stats.completed, stats.total) == (4, 3, 1, 8)

        (lone,) = await b.enqueue("held-only", [new("a")])
        await b.claim("held-only", "w", 1, None, 30_000)
        summaries = {s.queue: s for s in await b.list_queues()}
        assert set(summaries) == {"q", "held-only"}
        assert summaries["held-only"].by_type == {"a": {"processing": 1}}
        assert summaries["q"].by_type["a"]["processing"] + summaries["q"].by_type["b"]["processing"] == 4
        assert [s.id for s in (await b.query_activities("held-only", only)).items] == [lone.activity_id]
    finally:
        await b.close()


async def test_one_flush_of_every_kind_of_ack(tmp_path: Path) -> None:
    """Plain completions go through one ack_completed statement, the rest one ack each, in one transaction.

    Completions with and without a result (text that JSON escaping must bring back byte for byte), a
    completion carrying an error, a retry, a failure, a retry of an activity an operator asked to cancel,
    stale acks (wrong token, never claimed) and a batch naming one id twice: each ends as ``ack`` alone
    would leave it, with its event, and exactly the stale ones are rejected.
    """
    b = await SqliteBackend.open(url_of(tmp_path / "a.db"))
    try:
        await b.enqueue("q", [new("t") for _ in range(9)])
        c = sorted(await b.claim("q", "w", 9, None, 30_000), key=lambda x: x.id)
        tricky = '{"s":"quote \\" backslash \\\\ tab \\t nul \\u0000 é 😀 \\ud83d\\ude00","n":[1,2.5,null]}'
        assert json.loads(tricky)  # valid JSON, as results are
        conn = sqlite3.connect(tmp_path / "a.db", isolation_level=None)
        conn.execute("UPDATE runnerq_activities SET cancel_requested_at = 1 WHERE id = ?", (c[5].id,))
        conn.close()
        acks = [
            Ack(c[0].id, c[0].claim_token, AckOutcome.COMPLETED),
            Ack(c[1].id, c[1].claim_token, AckOutcome.COMPLETED, tricky.encode()),
            Ack(c[2].id, c[2].claim_token, AckOutcome.COMPLETED, b"1", "note"),
            Ack(c[3].id, c[3].claim_token, AckOutcome.RETRY, None, "again", 0),
            Ack(c[4].id, c[4].claim_token, AckOutcome.FAILED, None, "bad"),
            Ack(c[5].id, c[5].claim_token, AckOutcome.RETRY, None, "again", 0),
            Ack(c[6].id, "f" * 32, AckOutcome.COMPLETED),
            Ack("0" * 32, c[7].claim_token, AckOutcome.COMPLETED),
        ]
        rejected = await b.ack("q", acks)
        assert sorted(rejected) == sorted([c[6].id, "0" * 32])
        status = {x.id: (await b.get_activity(x.id)).status for x in c}  # type: ignore[union-attr]
        assert [status[x.id] for x in c] == ["completed", "completed", "completed", "retrying", "failed",
                                             "cancelled", "processing", "processing", "processing"]
        r0, r1, r2 = [await b.get_result(x.id) for x in c[:3]]
        assert r0 is not None and r0.data is None
        assert r1 is not None and r1.data == tricky
        assert r2 is not None and r2.data == "1"
        last = {x.id: (await b.get_activity(x.id)).last_error for x in c[:3]}  # type: ignore[union-attr]
        assert last[c[2].id] == "note" and last[c[0].id] is None
        kinds = {x.id: [e.event_type for e in await b.get_events(x.id)] for x in c}
        assert [kinds[x.id][-1] for x in c[:6]] == ["completed", "completed", "completed", "retrying", "failed",
                                                    "cancelled"]
        assert kinds[c[6].id][-1] == "claimed"
        # one id twice: the first ack whose claim is held is applied, the other rejected
        twice = [Ack(c[7].id, "e" * 32, AckOutcome.COMPLETED), Ack(c[7].id, c[7].claim_token, AckOutcome.COMPLETED),
                 Ack(c[7].id, c[7].claim_token, AckOutcome.FAILED, None, "x"),
                 Ack(c[8].id, c[8].claim_token, AckOutcome.COMPLETED)]
        assert await b.ack("q", twice) == [c[7].id, c[7].id]
        assert (await b.get_activity(c[7].id)).status == "completed"  # type: ignore[union-attr]
        assert (await b.get_activity(c[8].id)).status == "completed"  # type: ignore[union-attr]
    finally:
        await b.close()


async def test_a_migration_gathers_analyze_statistics_again_on_a_file_that_had_them(tmp_path: Path) -> None:
    """Statistics name dropped indexes and miss new ones after a migration: the planner then walked the
    status index for a type listing. A file that had ANALYZE statistics gets them again; one without none."""
    for analyzed in (True, False):
        path = tmp_path / f"stats-{analyzed}.db"
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute(Q["create_migrations_table"])
        for m in load_migrations("runnerq_fast.backends.sqlite"):
            if m.version < 10:
                for statement in _split_script(m.sql):
                    conn.execute(statement)
                conn.execute(Q["record_migration"], (m.version, m.name, 0))
        conn.execute("WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 3000) "
                     "INSERT INTO runnerq_activities (id, queue_name, activity_type, status, priority, max_retries, "
                     "timeout_ms, payload, metadata, created_at, ready_at) "
                     "SELECT printf('%032x', i), 'q', 't' || (i % 10), CASE WHEN i % 100 = 0 THEN 'failed' "
                     "ELSE 'completed' END, 2, 3, 0, '{}', '{}', i, i FROM s")
        if analyzed:
            conn.execute("ANALYZE")
        conn.close()
        b = await SqliteBackend.open(url_of(path))
        await b.close()
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            has = conn.execute(Q["has_statistics"]).fetchone() is not None
            assert has is analyzed
            if analyzed:
                named = {r[0] for r in conn.execute("SELECT idx FROM sqlite_stat1 WHERE tbl = 'runnerq_activities'")}
                assert "runnerq_activities_type_created_idx" in named
            plan = " | ".join(r[3] for r in conn.execute(
                "EXPLAIN QUERY PLAN " + Q["scan_type_desc"], ("q", "completed", -1, 2**62, 2**62, "", "t3")))
            assert "runnerq_activities_type_created_idx" in plan, plan
        finally:
            conn.close()


async def test_writes_waiting_together_share_one_commit_and_each_stays_atomic(tmp_path: Path) -> None:
    """Group commit: writes queued behind a busy thread run in one transaction, one savepoint each.

    A write that raises is undone alone (its row is gone) and raises to its caller; the others are
    stored and answered; one commit serves them all. When the write lock cannot be had, every
    write of the group fails, and the next ones succeed once it is free.
    """
    path = tmp_path / "g.db"
    b = await SqliteBackend.open(url_of(path), busy_timeout=0.05)
    try:
        def boom(conn: sqlite3.Connection) -> None:
            conn.execute(Q["insert_event"], ("ghost", "q", "enqueued", 1, None))
            raise ValueError("boom")

        b.commits = b.writes = 0
        busy = asyncio.ensure_future(b._call(time.sleep, 0.2))  # the thread is busy: the writes below queue up
        await asyncio.sleep(0.05)
        first, failed, last = await asyncio.gather(
            b.enqueue("q", [new("t")]), b._write(boom), b.enqueue("q", [new("t")]), return_exceptions=True)
        await busy
        assert isinstance(failed, ValueError)
        assert isinstance(first, list) and isinstance(last, list)
        assert (b.commits, b.writes) == (1, 3)
        assert (await b.stats("q")).pending == 2
        assert await b.get_events("ghost") == []

        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # holds the write lock
        busy = asyncio.ensure_future(b._call(time.sleep, 0.1))
        await asyncio.sleep(0.02)
        got = await asyncio.gather(b.enqueue("q", [new("t")]), b.enqueue("q", [new("t")]), return_exceptions=True)
        await busy
        assert all(isinstance(g, BackendError) and "locked" in str(g) for g in got), got
        other.execute("ROLLBACK")
        other.close()
        await b.enqueue("q", [new("t")])
        assert (await b.stats("q")).pending == 3
    finally:
        await b.close()


async def test_a_file_before_0015_keeps_working_then_migrates_to_event_tracebacks(tmp_path: Path) -> None:
    # a file an older release wrote, with no traceback column on its events: a read-only look shows its
    # timeline without tracebacks; opened as usual it migrates and the next failed attempt keeps its own
    path = tmp_path / "old.db"
    b = await SqliteBackend.open(url_of(path))
    item = new("t", max_retries=3)
    await b.enqueue("q", [item])
    (c,) = await b.claim("q", "w", 1, None, 30_000)
    await b.ack("q", [Ack(c.id, c.claim_token, AckOutcome.RETRY, None, "E: 1", 0, "tb 1")])
    await b.close()
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE runnerq_events DROP COLUMN traceback")
    conn.execute("DELETE FROM runnerq_migrations WHERE version = 15")
    conn.commit()
    conn.close()
    ro = await rq.connect(url_of(path), read_only=True)
    try:
        events = await ro.get_events(item.id)
        assert [(e.event_type, e.traceback) for e in events] == [
            ("enqueued", None),
            ("claimed", None),
            ("retrying", None),
        ]
    finally:
        await ro.close()
    b = await SqliteBackend.open(url_of(path))
    try:
        (c,) = await b.claim("q", "w", 1, None, 30_000)
        await b.ack("q", [Ack(c.id, c.claim_token, AckOutcome.DEAD_LETTER, None, "E: 2", 0, "tb 2")])
        events = await b.get_events(item.id)
        assert [(e.event_type, e.traceback) for e in events if e.event_type in ("retrying", "dead_letter")] == [
            ("retrying", None),
            ("dead_letter", "tb 2"),
        ]
    finally:
        await b.close()
