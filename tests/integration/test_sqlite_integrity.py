"""SQLite-specific integrity (issue 11 item 2): a lease or ready time of the wrong type no longer hides a row."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from runnerq_fast.backends.sqlite import SqliteBackend
from runnerq_fast.backends.sqlite.backend import Q, apply_migrations
from tests.conformance import new


def _set(path: Path, activity_id: str, assignment: str) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(f"UPDATE runnerq_activities SET {assignment} WHERE id = ?", (activity_id,))
        conn.commit()
    finally:
        conn.close()


async def test_a_held_activity_whose_lease_is_text_is_reaped_as_corrupt_alone(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    b = await SqliteBackend.open(f"sqlite:///{path}")
    try:
        await b.enqueue("q", [new("t") for _ in range(3)])
        got = await b.claim("q", "w", 3, None, 60_000)
        bad = got[1].id
        _set(path, bad, "lease_expires_at = 'tomorrow'")  # on main: never expired, processing forever
        report = await b.requeue_expired("q", 100)
        assert report.dead_lettered == [bad] and report.requeued == []
        snap = await b.get_activity(bad)
        assert snap is not None and snap.status == "dead_letter"
        assert snap.last_error == "corrupt row: lease_expires_at_ms is 'tomorrow', not an integer"
        stats = await b.stats("q")
        assert (stats.processing, stats.dead_letter) == (2, 1)
    finally:
        await b.close()


async def test_a_claim_dead_letters_corrupt_rows_and_gives_their_places_to_the_next(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    b = await SqliteBackend.open(f"sqlite:///{path}")
    try:
        ids = [r.activity_id for r in await b.enqueue("q", [new("t") for _ in range(3)])]
        _set(path, ids[0], "priority = 'high'")  # TEXT sorts before every number: this claim meets it first
        _set(path, ids[2], "ready_at = 'now'")  # on main: never ready, pending forever
        got = await b.claim("q", "w", 1, None, 60_000)
        assert [a.id for a in got] == [ids[1]]
        assert await b.claim("q", "w", 10, None, 60_000) == []
        for i in (ids[0], ids[2]):
            snap = await b.get_activity(i)
            assert snap is not None and snap.status == "dead_letter" and snap.corrupt is not None
        stats = await b.stats("q")
        assert (stats.pending, stats.processing, stats.dead_letter) == (0, 1, 2)
    finally:
        await b.close()


def test_the_reaper_statement_reads_the_queues_processing_entries(tmp_path: Path) -> None:
    """Migration 0011: the reaper reads the queue's range of processing_idx and tests the lease on each entry."""
    conn = sqlite3.connect(tmp_path / "plan.db", isolation_level=None)
    try:
        apply_migrations(conn)
        plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + Q["expired"], ("q", 1, 10))]
        program = conn.execute("EXPLAIN " + Q["expired"], ("q", 1, 10)).fetchall()
        columns = [r[2] for r in conn.execute("PRAGMA index_info(runnerq_activities_processing_idx)")]
    finally:
        conn.close()
    search = "SEARCH runnerq_activities USING INDEX runnerq_activities_processing_idx (queue_name=?)"
    searches = [p for p in plan if p.startswith(search)]
    assert len(searches) == 1, plan
    assert not any(p.startswith("SCAN runnerq_activities") for p in plan), plan
    assert columns[-1] == "lease_expires_at", columns
    # the lease is read from the index entry (column 5) before the table row is sought (DeferredSeek)
    seek = next(r[0] for r in program if r[1] == "DeferredSeek")
    index_cursor = next(r[2] for r in program if r[1] == "DeferredSeek")
    first_test = next(r[0] for r in program if r[1] == "Column" and r[2] == index_cursor and r[3] == 5)
    assert first_test > seek and not [r for r in program[seek:first_test] if r[1] == "Column" and r[2] != index_cursor]


async def test_metadata_reads_as_a_dict_and_damaged_metadata_as_empty_with_the_reason(tmp_path: Path) -> None:
    """``ActivitySnapshot.metadata`` was the stored JSON text (issue 27 item 7d); a dict now, decoded once."""
    path = tmp_path / "q.db"
    b = await SqliteBackend.open(f"sqlite:///{path}")
    try:
        good, bad = [r.activity_id for r in await b.enqueue("q", [new("t", metadata=b'{"k":"v"}'), new("t")])]
        _set(path, bad, "metadata = '[1, 2]'")
        snap = await b.get_activity(good)
        assert snap is not None and snap.metadata == {"k": "v"} and snap.corrupt is None
        damaged = await b.get_activity(bad)
        assert damaged is not None and damaged.metadata == {}
        assert damaged.corrupt == "corrupt row: metadata is '[1, 2]', not a JSON object of strings"
        assert damaged.status == "pending" and damaged.activity_type == "t"  # the other fields as stored
    finally:
        await b.close()
