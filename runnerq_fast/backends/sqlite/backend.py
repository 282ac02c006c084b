"""SQLite backend: one file, any number of worker processes.

Every backend call is one job on ONE dedicated thread that owns the
connection, so blocking ``sqlite3`` calls never run on the event loop and a
call costs one thread hop however many statements it runs. Every write runs
in a ``BEGIN IMMEDIATE`` transaction (SQLite's single write lock, waited for up
to the busy timeout), so a claim, an ack flush or an enqueue batch is atomic
across processes; writes that wait for the thread together share one
transaction, each in a savepoint (group commit: one commit and WAL sync for an
ack flush and the claim the engine sends beside it). A claim is one
``SELECT`` over the dequeue index and one ``UPDATE`` of those rows by seq
(``claim_set``), the completions of an ack flush one ``UPDATE ... FROM
json_each``, enqueue batches go through
``executemany``, and the events of a claim or an ack flush are one
``INSERT ... SELECT`` over ``json_each`` per run of equal (type, detail).

Wakeups: a write made through this instance wakes this process's fetchers,
result futures and event streams at once, and so does a write through another
instance open on the same file in this process. Writes by other processes are
noticed by polling ``PRAGMA data_version`` (a counter read from shared memory,
no disk access) every ``poll_interval`` seconds while someone waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import msgspec

from runnerq_fast import filters
from runnerq_fast.backends import keyset, rowcheck
from runnerq_fast.backends._waiters import discard_waiter
from runnerq_fast.backends._wakeups import WorkSignal
from runnerq_fast.backends.sqlfiles import load_migrations, load_queries, migration_report
from runnerq_fast.backends.sqlite import faults
from runnerq_fast.codec import decode_json
from runnerq_fast.errors import BackendError, ConfigError
from runnerq_fast.models import (
    LEASE_EXPIRED_UNCHARGED,
    Ack,
    AckOutcome,
    ActionResult,
    ActivityCount,
    ActivityEvent,
    ActivityFilter,
    ActivityPage,
    ActivityResult,
    ActivitySnapshot,
    ClaimedActivity,
    DeadLetterRecord,
    EnqueueOutcome,
    EnqueueResult,
    LeaseRef,
    LeaseReport,
    MigrationReport,
    NewActivity,
    OnDuplicate,
    ProgressUpdate,
    QueueStats,
    QueueSummary,
    ReadyWork,
    ReapReport,
    TypeDefaults,
    WorkerInfo,
)
from runnerq_fast.resilience import Fault
from runnerq_fast.storage import Backend, check_hold, check_prune, check_prune_events, check_worker_ttl
from runnerq_fast.urls import redact_url

__all__ = ["SqliteBackend", "apply_migrations", "sqlite_path"]

log = logging.getLogger(__name__)

_PACKAGE = __name__.rpartition(".")[0]
Q = load_queries(_PACKAGE)
T = TypeVar("T")

_STREAM_PAGE = 1000
_CLAIM_ROUNDS = 4  # claim statements per claim at most when corrupt rows (dead-lettered) take places
_REUSABLE = frozenset({"failed", "dead_letter", "cancelled"})
_SYNCHRONOUS = ("off", "normal", "full", "extra")
_json = msgspec.json.encode

_OPEN: dict[str, weakref.WeakSet[SqliteBackend]] = {}
"""Instances open in this process, by the file's real path (for instant wakeups between them)."""


_WriteJob = tuple[Callable[..., Any], tuple[Any, ...], "asyncio.Future[Any]"]


def _settle(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Answer one write of a group (on its event loop), unless its caller gave up waiting."""
    if fut.done():
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _norm_id(value: str) -> str:
    """An activity id in the stored 32-hex form (dashed UUIDs are accepted too)."""
    if len(value) == 32:
        return value
    try:
        return uuid.UUID(value).hex
    except (ValueError, TypeError, AttributeError):
        return value


def sqlite_path(url: str) -> str:
    """The file path named by a ``sqlite://`` URL (SQLAlchemy's convention).

    ``sqlite:///relative.db`` is relative to the working directory;
    ``sqlite:////abs/path.db`` (four slashes) is absolute.

    Parameters
    ----------
    url : str
        The URL.

    Returns
    -------
    str
        The path, percent-decoded, as given (not resolved).

    Raises
    ------
    ConfigError
        If the URL is not ``sqlite:``, lacks the ``//`` after the scheme,
        names a host, names no file, or asks
        for an in-memory database (``memory://`` is the in-process backend).
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigError(f"malformed SQLite URL {redact_url(url)!r}: {exc}") from None
    if parts.scheme.lower() != "sqlite":
        raise ConfigError(f"not a SQLite URL: {redact_url(url)!r}")
    if not url[len(parts.scheme) + 1 :].startswith("//"):
        # sqlite:/x.db or sqlite:x.db: relative or absolute? Refuse rather than guess.
        raise ConfigError(
            f"malformed SQLite URL {redact_url(url)!r}: expected sqlite:// followed by the path; "
            "use sqlite:///relative/file.db or sqlite:////absolute/file.db"
        )
    if parts.netloc:
        raise ConfigError(
            f"SQLite URL {redact_url(url)!r} names a host ({parts.netloc!r}); use sqlite:///relative/file.db "
            "or sqlite:////absolute/file.db"
        )
    path = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
    if not path or path.endswith("/"):
        raise ConfigError(
            f"SQLite URL {redact_url(url)!r} names no file; use sqlite:///relative/file.db or sqlite:////absolute/file.db"
        )
    if path == ":memory:":
        raise ConfigError("an in-memory SQLite database cannot be shared by workers; use memory:// instead")
    if "\x00" in path:
        raise ConfigError(f"SQLite URL {redact_url(url)!r} names a file with a NUL character (%00) in its path")
    return path


def _options(url: str) -> dict[str, str]:
    query = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
    unknown = set(query) - {"synchronous"}
    if unknown:
        raise ConfigError(f"unknown SQLite URL option(s) {sorted(unknown)} in {redact_url(url)!r}; known: synchronous")
    return query


def _split_script(script: str) -> list[str]:
    """A migration script's statements, in order (comments between them dropped)."""
    statements: list[str] = []
    buf: list[str] = []
    for line in script.splitlines():
        if not buf and (not line.strip() or line.strip().startswith("--")):
            continue
        buf.append(line)
        text = "\n".join(buf)
        if sqlite3.complete_statement(text):
            statements.append(text.strip())
            buf = []
    if "\n".join(buf).strip():
        raise ValueError(f"migration ends inside a statement: {buf[0][:60]!r}")
    return statements


def apply_migrations(conn: sqlite3.Connection) -> list[int]:
    """Apply the pending numbered migrations on ``conn``.

    Runs in one ``BEGIN IMMEDIATE`` transaction, so processes opening one file
    together apply each migration exactly once. A file with ``ANALYZE``
    statistics has them gathered again after a migration (they would name
    dropped indexes and miss new ones). A file that records versions this
    release does not ship (a newer runnerq-fast migrated it) is left as it
    is, with a warning (:func:`~runnerq_fast.backends.sqlfiles.migration_report`).

    Parameters
    ----------
    conn : sqlite3.Connection
        In autocommit mode (``isolation_level=None``), not inside a transaction.

    Returns
    -------
    list of int
        Versions applied by this call (empty when already up to date).
    """
    return list(_apply_migrations(conn, "SQLite database").applied)


def _apply_migrations(conn: sqlite3.Connection, store: str) -> MigrationReport:
    """:func:`apply_migrations`, reporting what it found too; ``store`` names the file in the warning."""
    applied_now: list[int] = []
    migrations = load_migrations(_PACKAGE)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(Q["create_migrations_table"])
        applied = {r[0] for r in conn.execute(Q["applied_migrations"])}
        for m in migrations:
            if m.version in applied:
                continue
            for statement in _split_script(m.sql):
                conn.execute(statement)
            conn.execute(Q["record_migration"], (m.version, m.name, _now_ms()))
            applied_now.append(m.version)
        if applied_now and conn.execute(Q["has_statistics"]).fetchone() is not None:
            # ANALYZE was run on this file: its statistics no longer describe the indexes a migration
            # dropped or created, and the planner prefers the indexes it has statistics for
            conn.execute("ANALYZE")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    if applied_now:
        log.info("applied runnerq SQLite migrations %s", applied_now)
    return migration_report(log, store, migrations, applied, applied_now)


_SNAPSHOT_FIELDS = ActivitySnapshot.__struct_fields__[:18]  # all but `corrupt`, in the order of the row
_DETAIL_FIELDS = (*_SNAPSHOT_FIELDS, "traceback")  # get_activity's row


def _snapshot(r: Sequence[Any]) -> ActivitySnapshot:
    """The snapshot of a listing row (``corrupt`` set if a column holds a value of the wrong type)."""
    return rowcheck.snapshot(dict(zip(_SNAPSHOT_FIELDS, r, strict=False)))


def _event(r: Sequence[Any]) -> ActivityEvent:
    return ActivityEvent(r[0], r[1], r[2], r[3], r[4], r[5])


def _result(r: Sequence[Any]) -> ActivityResult:
    return ActivityResult(r[0], r[1], r[2], r[3], r[4])


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode()


class SqliteBackend(Backend):
    """Activities, events and results in one SQLite file (WAL mode).

    Open with :meth:`open` (or :func:`runnerq_fast.connect`), not the
    constructor.

    Parameters
    ----------
    url : str
        The ``sqlite://`` URL.
    path : str
        The database file.
    conn : sqlite3.Connection
        The connection, owned from now on by ``thread``.
    thread : concurrent.futures.ThreadPoolExecutor
        One worker thread; every call on ``conn`` runs there.
    poll_interval : float
        Seconds between two ``PRAGMA data_version`` checks while a fetcher
        idles in :meth:`wait_for_work`, a result is awaited or an event stream
        is open; nothing is polled otherwise. Default 0.01 s.
    stream_poll_interval : float
        Longest an :meth:`event_stream` waits between two queries without a
        wakeup. Default 0.5 s.
    """

    name = "sqlite"

    def __init__(
        self,
        url: str,
        path: str,
        conn: sqlite3.Connection,
        thread: ThreadPoolExecutor,
        *,
        poll_interval: float = 0.01,
        stream_poll_interval: float = 0.5,
        read_only: bool = False,
    ) -> None:
        self.url = url
        self.path = path
        self.read_only = read_only
        self._conn = conn
        self._thread = thread
        self._poll = poll_interval
        self._stream_poll = stream_poll_interval
        self._work: dict[str, WorkSignal] = {}
        self._idle_fetchers = 0
        #: ``PRAGMA data_version`` checks made so far (for tests and tuning).
        self.version_checks = 0
        self._streams: set[asyncio.Event] = set()
        self._waiters: dict[str, list[asyncio.Future[ActivityResult]]] = {}
        self._watch_task: asyncio.Task[None] | None = None
        self._lookup_task: asyncio.Task[None] | None = None
        self._lookup_again = False
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._key = os.path.realpath(path)
        self._writes: list[_WriteJob] = []  # waiting for the thread; taken together into one transaction
        self._writes_queued = False  # a _write_group call is queued on the thread
        self._writes_lock = threading.Lock()
        #: Write transactions committed, and the writes they carried (group commit; for tests and tuning).
        self.commits = self.writes = 0

    # ------------------------------------------------------------ lifecycle
    @classmethod
    async def open(
        cls,
        url: str,
        *,
        migrate: bool = True,
        read_only: bool = False,
        busy_timeout: float = 5.0,
        synchronous: str | None = None,
        poll_interval: float = 0.01,
        stream_poll_interval: float = 0.5,
    ) -> SqliteBackend:
        """Open (creating unless ``read_only``) the file and migrate it.

        Parameters
        ----------
        url : str
            ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``;
            optional query ``?synchronous=normal`` (default ``full``).
        migrate : bool
            Apply pending migrations. Default ``True``; ignored when ``read_only``.
        read_only : bool
            Open an existing file for reading only: nothing is created or
            written, and a file without the schema is an error. Default ``False``.
        busy_timeout : float
            Seconds a write waits for another process's write lock. Default 5 s.
        synchronous : str, optional
            SQLite ``synchronous`` level: ``full`` (default: every committed
            transaction survives a power loss), ``normal`` (survives a process
            crash), ``off``, ``extra``. Overrides the URL's option.
        poll_interval : float
            See :class:`SqliteBackend`. Seconds.
        stream_poll_interval : float
            See :class:`SqliteBackend`. Seconds.

        Returns
        -------
        SqliteBackend

        Raises
        ------
        ConfigError
            If the URL is malformed, its directory does not exist, the path is
            not a regular file (a directory, a FIFO, ...), the file is
            not a SQLite database (it is left untouched), or ``read_only`` and
            the file or its schema does not exist.
        BackendError
            If the file cannot be opened or migrated (permissions, locked for
            longer than ``busy_timeout``, disk full).
        """
        path = sqlite_path(url)
        opts = _options(url)
        level = (synchronous or opts.get("synchronous") or "full").lower()
        if level not in _SYNCHRONOUS:
            raise ConfigError(f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, got {level!r}")
        if not busy_timeout >= 0:
            raise ConfigError(f"busy_timeout must be >= 0 seconds, got {busy_timeout}")
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise ConfigError(f"cannot open SQLite database {path!r}: directory {directory!r} does not exist")
        if os.path.exists(path) and not os.path.isfile(path):
            # a directory, a FIFO (opening it would block the connection thread), a device, ...
            raise ConfigError(f"cannot open SQLite database {path!r}: it is not a regular file")
        if read_only and not os.path.isfile(path):
            raise ConfigError(f"no SQLite database at {path!r} (nothing was created)")
        thread = ThreadPoolExecutor(1, thread_name_prefix="runnerq-sqlite")
        loop = asyncio.get_running_loop()
        try:
            conn = await loop.run_in_executor(thread, _connect, path, read_only, busy_timeout, level, migrate)
        except BaseException:
            thread.shutdown(wait=False)
            raise
        self = cls(
            url, path, conn, thread, poll_interval=poll_interval, stream_poll_interval=stream_poll_interval,
            read_only=read_only,
        )
        self._loop = loop
        _OPEN.setdefault(self._key, weakref.WeakSet()).add(self)
        return self

    def _store_fault(self, exc: Exception) -> Fault | None:
        return faults.classify(exc)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise BackendError(f"SQLite backend {self.path!r} is closed")
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` atomically in a BEGIN IMMEDIATE transaction on the thread; its result once committed.

        Group commit: writes that wait for the thread together (an ack flush
        and the next claim, typically) share one transaction, each inside a
        savepoint of its own, so each stays atomic (one that raises is rolled
        back alone and raises) and one commit, one WAL sync, serves them all.
        None is answered before that commit returns, so what a caller is told
        is stored is as durable as with a transaction of its own.
        """
        if self.read_only:
            raise BackendError(f"SQLite database {self.path!r} was opened read-only")
        if self._closed:
            raise BackendError(f"SQLite backend {self.path!r} is closed")
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        with self._writes_lock:
            self._writes.append((fn, args, fut))
            submit = not self._writes_queued
            self._writes_queued = True
        if submit:
            self._thread.submit(self._write_group)
        return await fut

    def _write_group(self) -> None:
        """Run every waiting write in one transaction (on the thread), then answer each."""
        with self._writes_lock:
            jobs, self._writes = self._writes, []
            self._writes_queued = False
        outcomes: list[tuple[bool, Any]]
        try:
            if len(jobs) == 1:
                fn, args, _ = jobs[0]
                outcomes = [(True, self._in_transaction(fn, *args))]
            else:
                outcomes = self._in_group(jobs)
        except BaseException as exc:  # BEGIN or COMMIT failed: nothing of the group is stored
            outcomes = [(False, exc)] * len(jobs)
        self.commits += 1
        self.writes += len(jobs)
        for (_, _, fut), (ok, value) in zip(jobs, outcomes, strict=True):
            with contextlib.suppress(RuntimeError):  # its event loop is closed: no one waits
                fut.get_loop().call_soon_threadsafe(_settle, fut, ok, value)

    def _in_group(self, jobs: list[_WriteJob]) -> list[tuple[bool, Any]]:
        """Each of ``jobs`` in a savepoint of one transaction; (True, result) or (False, its exception) each."""
        conn = self._conn
        outcomes: list[tuple[bool, Any]] = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            for fn, args, _ in jobs:
                conn.execute("SAVEPOINT runnerq_write")
                try:
                    outcomes.append((True, fn(conn, *args)))
                except Exception as exc:  # this write alone is undone
                    conn.execute("ROLLBACK TO runnerq_write")
                    outcomes.append((False, exc))
                conn.execute("RELEASE runnerq_write")
            conn.execute("COMMIT")  # a COMMIT refused (busy) leaves the transaction open: roll it back too
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return outcomes

    def _in_transaction(self, fn: Callable[..., T], *args: Any) -> T:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            out = fn(conn, *args)
            conn.execute("COMMIT")  # a COMMIT refused (busy) leaves the transaction open: roll it back too
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return out

    async def migrate(self) -> MigrationReport:
        """Apply pending migrations (safe from many processes at once).

        Returns
        -------
        MigrationReport
            The versions applied, and those the file records that this
            release does not know (also logged as a warning).

        Raises
        ------
        BackendError
            If the backend was opened read-only, or the file cannot be migrated.
        """
        if self.read_only:
            raise BackendError(f"SQLite database {self.path!r} was opened read-only")
        return await self._call(_apply_migrations, self._conn, f"SQLite database {self.path!r}")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True  # new calls are refused from here on
        siblings = _OPEN.get(self._key)
        if siblings is not None:
            siblings.discard(self)
            if not siblings:
                del _OPEN[self._key]
        for ev in self._work.values():
            ev.set()
        for w in self._streams:
            w.set()
        for task in (self._watch_task, self._lookup_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        try:
            # queued behind any call already submitted, so none runs on a closed connection
            await asyncio.get_running_loop().run_in_executor(self._thread, self._conn.close)
        finally:
            self._thread.shutdown(wait=False)

    # -------------------------------------------------------- notifications
    def _work_event(self, queue: str) -> WorkSignal:
        ev = self._work.get(queue)
        if ev is None:
            ev = self._work[queue] = WorkSignal()
        return ev

    def _wake_work(self, queue: str) -> None:
        ev = self._work.get(queue)
        if ev is not None:
            ev.set()

    def _wake_streams(self) -> None:
        for w in self._streams:
            w.set()

    def _on_external_change(self) -> None:
        """Another connection committed: anything may be ready, finished or recorded."""
        if self._closed:
            return
        for ev in self._work.values():
            ev.set()
        self._wake_streams()
        self._schedule_lookup()

    def _tell_siblings(self) -> None:
        """Wake the other instances of this process open on the same file, at once."""
        siblings = _OPEN.get(self._key)
        if siblings is None or len(siblings) < 2:
            return
        here = self._loop
        for other in list(siblings):
            if other is self or other._closed:
                continue
            if other._loop is here:
                other._on_external_change()
            elif other._loop is not None:
                with contextlib.suppress(RuntimeError):  # its loop is closed
                    other._loop.call_soon_threadsafe(other._on_external_change)

    def _ensure_watch(self) -> None:
        if self._watch_task is None and not self._closed:
            self._watch_task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        """Notice commits by other connections (processes) via ``PRAGMA data_version``."""
        conn = self._conn
        last: int | None = None

        def version() -> int:
            return int(conn.execute("PRAGMA data_version").fetchone()[0])

        while not self._closed:
            if self._idle_fetchers or self._waiters or self._streams:
                self.version_checks += 1
                try:
                    now = await self._call(version)
                except (sqlite3.Error, BackendError) as exc:
                    log.warning("PRAGMA data_version failed: %s", exc)
                    now = None
                if now is not None and last is not None and now != last:
                    self._on_external_change()
                last = now
            await asyncio.sleep(self._poll)

    def _schedule_lookup(self) -> None:
        if not self._waiters or self._closed:
            return
        self._lookup_again = True
        if self._lookup_task is None or self._lookup_task.done():
            self._lookup_task = asyncio.get_running_loop().create_task(self._lookup_results())

    async def _lookup_results(self) -> None:
        """Resolve every awaited id that has a result; one query per round."""
        while self._lookup_again and self._waiters and not self._closed:
            self._lookup_again = False
            ids = _json(list(self._waiters))
            try:
                rows = await self._call(self._fetchall, Q["get_results"], (ids,))
            except (sqlite3.Error, BackendError) as exc:
                log.warning("result lookup failed, retrying: %s", exc)
                self._lookup_again = True
                await asyncio.sleep(0.1)
                continue
            for r in rows:
                res = _result(r)
                for fut in self._waiters.get(res.activity_id, ()):
                    if not fut.done():
                        fut.set_result(res)

    def _fetchall(self, sql: str, params: Sequence[Any]) -> list[Any]:
        return self._conn.execute(sql, params).fetchall()

    def _fetchone(self, sql: str, params: Sequence[Any]) -> Any:
        return self._conn.execute(sql, params).fetchone()

    # ---------------------------------------------------------------- queueing
    async def enqueue(
        self, queue: str, items: Sequence[NewActivity], *, connection: object | None = None
    ) -> list[EnqueueResult]:
        """Store ``items`` (see :meth:`Backend.enqueue`); ``connection`` joins the caller's transaction.

        Parameters
        ----------
        queue : str
            Queue name.
        items : sequence of NewActivity
            Already validated.
        connection : sqlite3.Connection, optional
            The caller's own connection to this backend's file, inside a
            transaction (``conn.in_transaction``; open it with
            ``BEGIN IMMEDIATE`` so the write lock is taken up front). The
            rows and their events are written on it, on the calling thread
            (the event loop's: a few statements, as the caller's own), and
            exist if and only if the caller commits. SQLite admits one writer
            at a time, so the engine's claims and acks on the file wait while
            that transaction holds the write lock. No notification is sent:
            engines notice the commit through ``PRAGMA data_version`` within
            ``poll_interval``. An idempotency key is decided under the
            caller's write lock; a deferred transaction that read before a
            concurrent commit fails with ``sqlite3.OperationalError``
            (database is locked) rather than decide on a stale read.

        Raises
        ------
        ConfigError
            If ``connection`` is not a ``sqlite3.Connection``, is not inside a
            transaction, or is open on another file.
        BackendError
            If this backend is closed or was opened read-only.
        """
        if connection is not None:
            results, _ = _enqueue(self._callers_cursor(connection), queue, items, _now_ms())
            return results
        if not items:
            return []
        results, created = await self._write(_enqueue, queue, items, _now_ms())
        if created:  # a delayed activity too: waiting fetchers time their wait again
            self._wake_work(queue)
            self._tell_siblings()
        self._wake_streams()
        return results

    def _callers_cursor(self, connection: object) -> sqlite3.Cursor:
        """A cursor on ``connection`` if it is a ``sqlite3.Connection`` to this file inside a transaction."""
        if not isinstance(connection, sqlite3.Connection):
            raise ConfigError(
                f"connection= must be a sqlite3.Connection to {self.path!r}, got {type(connection).__name__}"
            )
        if self._closed or self.read_only:
            why = "is closed" if self._closed else "was opened read-only"
            raise BackendError(f"SQLite backend {self.path!r} {why}")
        if not connection.in_transaction:
            raise ConfigError(
                "connection= must be inside a transaction (conn.execute('BEGIN IMMEDIATE') first); "
                "to enqueue outside one, leave connection out"
            )
        cur = connection.cursor()
        cur.row_factory = None  # the caller's row factory is theirs; these queries read plain tuples
        files = [r[2] for r in cur.execute("PRAGMA database_list").fetchall() if r[1] == "main"]
        if not files or not files[0] or os.path.realpath(files[0]) != self._key:
            raise ConfigError(
                f"connection= is open on {files[0] if files and files[0] else 'no file'!r}, "
                f"not on this backend's file {self.path!r}"
            )
        return cur

    async def claim(
        self,
        queue: str,
        worker_id: str,
        limit: int,
        activity_types: Sequence[str] | None,
        lease_ms: int,
    ) -> list[ClaimedActivity]:
        self._work_event(queue).clear(activity_types)  # a wakeup during the query sets it again
        if limit <= 0:
            return []
        token = uuid.uuid4().hex
        rows = await self._write(_claim, queue, worker_id, token, limit, _types_json(activity_types), lease_ms,
                                 _now_ms())
        if rows:
            self._wake_streams()
        return [ClaimedActivity(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], token, r[8], r[9]) for r in rows]

    async def claim_suspect(
        self, queue: str, worker_id: str, activity_types: Sequence[str] | None, lease_ms: int
    ) -> list[ClaimedActivity]:
        if activity_types is not None and not activity_types:
            return []
        token = uuid.uuid4().hex
        rows = await self._write(_claim, queue, worker_id, token, 1, _types_json(activity_types), lease_ms, _now_ms(),
                                 "claim_suspect")
        if rows:
            self._wake_streams()
        return [ClaimedActivity(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], token, r[8], r[9]) for r in rows]

    async def suspects_ready(self, queue: str, activity_types: Sequence[str] | None) -> int:
        row = await self._call(self._fetchone, Q["suspects_ready"], (queue, _now_ms(), _types_json(activity_types)))
        return 0 if row is None else int(row[0])

    async def ack(self, queue: str, acks: Sequence[Ack]) -> list[str]:
        if not acks:
            return []
        rejected, retried, finished = await self._write(_ack, queue, acks, _now_ms())
        if retried:  # now or later: waiting fetchers claim or time their wait again
            self._wake_work(queue)
        if finished and self._waiters:
            self._schedule_lookup()
        if finished or retried:
            self._tell_siblings()
        self._wake_streams()
        if rejected:
            log.info("rejected %d stale acks on queue %r (claim no longer held)", len(rejected), queue)
        return rejected

    async def extend_leases(self, queue: str, leases: Sequence[LeaseRef], lease_ms: int) -> LeaseReport:
        if not leases:
            return LeaseReport([], [])
        report: LeaseReport = await self._write(_extend, queue, leases, lease_ms, _now_ms())
        self._wake_streams()
        return report

    async def set_progress(self, queue: str, updates: Sequence[ProgressUpdate]) -> list[str]:
        if not updates:
            return []
        lost: list[str] = await self._write(_set_progress, queue, updates, _now_ms())
        self._wake_streams()
        return lost

    async def release(self, queue: str, leases: Sequence[LeaseRef]) -> list[str]:
        if not leases:
            return []
        done, cancelled = await self._write(_release, queue, leases, _now_ms())
        if cancelled:
            self._schedule_lookup()
        if done:
            self._wake_work(queue)
            self._wake_streams()
            self._tell_siblings()
        return list(done)

    async def requeue_expired(self, queue: str, limit: int) -> ReapReport:
        if limit <= 0:
            return ReapReport([], [])
        requeued, dead, cancelled = await self._write(_reap, queue, limit, _now_ms())
        if requeued:
            self._wake_work(queue)
        if (dead or cancelled) and self._waiters:
            self._schedule_lookup()
        if requeued or dead or cancelled:
            self._wake_streams()
            self._tell_siblings()
            log.info("reaped queue %r: %d requeued, %d dead-lettered, %d cancelled", queue, len(requeued), len(dead),
                     len(cancelled))
        return ReapReport(requeued, dead, cancelled)

    async def wait_for_work(
        self, queue: str, timeout: float, activity_types: Sequence[str] | None = None
    ) -> None:
        """Wait for a wakeup, at most until the next scheduled or retrying activity of the caller's types is due.

        The due time is read once per wait (query ``next_due``); a delayed
        enqueue or a retry through this process wakes the wait to time it
        again, one by another process is noticed at the next
        ``PRAGMA data_version`` check. If the read fails the wait lasts
        ``timeout``.
        """
        ev = self._work_event(queue)
        if self._closed or ev.is_set(activity_types):
            return
        self._ensure_watch()
        self._idle_fetchers += 1
        try:
            try:
                if activity_types is None:
                    row = await self._call(self._fetchone, Q["next_due_any"], (queue,))
                else:
                    types = _json(list(activity_types)).decode()
                    row = await self._call(self._fetchone, Q["next_due"], (queue, types))
            except (sqlite3.Error, BackendError) as exc:
                log.debug("reading the next due time of queue %r failed: %s", queue, exc)
                row = None
            if row is not None and row[0] is not None:
                due = (int(row[0]) + 1) / 1000.0 - time.time()  # + 1 ms: the store's clock has millisecond steps
                if due <= 0:
                    return
                timeout = min(timeout, due)
            await ev.wait(activity_types, timeout)
        finally:
            self._idle_fetchers -= 1

    # --------------------------------------------------------------- results
    async def get_result(self, activity_id: str) -> ActivityResult | None:
        row = await self._call(self._fetchone, Q["get_result"], (_norm_id(activity_id),))
        return None if row is None else _result(row)

    async def wait_for_result(self, activity_id: str, timeout: float | None) -> ActivityResult | None:
        key = _norm_id(activity_id)
        fut: asyncio.Future[ActivityResult] = asyncio.get_running_loop().create_future()
        # Register before looking, so a wakeup between the two is not lost.
        self._waiters.setdefault(key, []).append(fut)
        self._ensure_watch()
        try:
            res = await self.get_result(key)
            if res is not None:
                return res
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return None
        finally:
            discard_waiter(self._waiters, key, fut)

    async def cancel(self, activity_id: str) -> bool:
        done = await self._write(_cancel, _norm_id(activity_id), _now_ms())
        if done:
            self._schedule_lookup()
            self._wake_streams()
            self._tell_siblings()
        return done

    # ------------------------------------------------------------ inspection
    async def stats(self, queue: str) -> QueueStats:
        rows = await self._call(self._fetchall, Q["stats"], (queue,))
        return QueueStats(**{r[0]: r[1] for r in rows})

    async def list_activities(
        self, queue: str, status: str | None, offset: int = 0, limit: int = 50
    ) -> list[ActivitySnapshot]:
        rows = await self._call(self._fetchall, Q["list_activities"], (queue, status, offset, limit))
        return [_snapshot(r) for r in rows]

    async def _read_unmigrated(
        self, fetch: Callable[..., Any], query: str, fallback: str, args: tuple[Any, ...]
    ) -> Any:
        """``fetch`` of ``query``; of ``fallback`` when a column it names is missing: a file opened
        read-only (``inspect``, ``serve --read-only``) is never migrated, so a later migration's column
        (0012 traceback, 0013 progress, 0015 event tracebacks) may not exist in it yet."""
        try:
            return await self._call(fetch, Q[query], args)
        except sqlite3.OperationalError as exc:
            if "no such column" not in str(exc):
                raise
            return await self._call(fetch, Q[fallback], args)

    async def get_activity(self, activity_id: str) -> ActivitySnapshot | None:
        row = await self._read_unmigrated(self._fetchone, "get_activity", "get_activity_before_0013",
                                          (_norm_id(activity_id),))
        if row is None:
            return None
        snap = rowcheck.snapshot(dict(zip(_DETAIL_FIELDS, row[:19], strict=False)))
        progress = row[19] if len(row) > 19 else None
        if progress is None:
            return snap
        text = progress.decode(errors="replace") if isinstance(progress, bytes) else str(progress)
        return msgspec.structs.replace(snap, progress=text)

    async def get_events(self, activity_id: str) -> list[ActivityEvent]:
        rows = await self._read_unmigrated(self._fetchall, "get_events", "get_events_before_0015",
                                           (_norm_id(activity_id),))
        return [_event(r) if len(r) < 7 or r[6] is None else ActivityEvent(*r) for r in rows]

    async def list_dead_letter(self, queue: str, offset: int = 0, limit: int = 50) -> list[DeadLetterRecord]:
        rows = await self._call(self._fetchall, Q["list_dead_letter"], (queue, offset, limit))
        return [DeadLetterRecord(_snapshot(r), r[15], r[18] or 0) for r in rows]

    async def event_stream(self, queue: str, after_id: int | None = None) -> AsyncIterator[ActivityEvent]:
        wake = asyncio.Event()
        self._streams.add(wake)
        self._ensure_watch()
        try:
            last = after_id
            if last is None:
                last = int((await self._call(self._fetchone, Q["last_event_id"], ()))[0])
            while not self._closed:
                wake.clear()
                rows = await self._call(self._fetchall, Q["events_after"], (queue, last, _STREAM_PAGE))
                for r in rows:
                    last = r[0]
                    yield _event(r)
                if len(rows) == _STREAM_PAGE:
                    continue
                # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancel that
                # arrives as the wake is set, and the cancelled stream kept reading the store
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._stream_poll):
                        await wake.wait()
        finally:
            self._streams.discard(wake)

    # ------------------------------------------------------ worker registry
    async def register_worker(self, info: WorkerInfo, ttl_ms: int) -> None:
        now = _now_ms()
        params = (
            info.queue, info.worker_id, info.host, info.pid, msgspec.json.encode(list(info.activity_types)).decode(),
            info.in_flight, info.concurrency, info.started_at_ms, info.last_seen_ms, now + check_worker_ttl(ttl_ms),
        )
        await self._write(_register_worker, params, now)

    async def deregister_worker(self, queue: str, worker_id: str) -> None:
        await self._write(_execute, Q["deregister_worker"], (queue, worker_id))

    async def list_workers(self, queue: str | None = None) -> list[WorkerInfo]:
        rows = await self._call(self._fetchall, Q["list_workers"], (_now_ms(), queue))
        return [_worker(r) for r in rows]

    async def set_type_defaults(self, queue: str, defaults: Sequence[TypeDefaults]) -> None:
        if defaults:
            now = _now_ms()
            rows = [(queue, d.activity_type, d.max_retries, d.timeout_ms, d.priority, now) for d in defaults]
            await self._write(_execute_many, Q["set_type_defaults"], rows)

    async def get_type_defaults(self, queue: str) -> dict[str, TypeDefaults]:
        rows = await self._call(self._fetchall, Q["get_type_defaults"], (queue,))
        return {r[0]: TypeDefaults(activity_type=r[0], max_retries=r[1], timeout_ms=r[2], priority=r[3]) for r in rows}

    async def ready_work(self, queue: str) -> ReadyWork:
        rows = await self._call(self._fetchall, Q["ready_by_type"], (queue, _now_ms()))
        return ReadyWork({r[0]: r[1] for r in rows}, min((r[2] for r in rows), default=None))

    # ------------------------------------------------- listings with filters
    async def list_queues(self) -> list[QueueSummary]:
        return await self._call(self._in_read, _list_queues, _now_ms())

    async def query_activities(
        self,
        queue: str,
        flt: ActivityFilter,
        *,
        limit: int = 50,
        cursor: str | None = None,
        newest_first: bool = True,
    ) -> ActivityPage:
        flt = filters.check_filter(flt)
        at = filters.check_page(limit, cursor, newest_first)
        rows, last = await self._call(self._in_read, _query, queue, flt, limit, at, newest_first)
        nxt = None if last is None else filters.encode_cursor(last[0], last[1], newest_first)
        return ActivityPage([_snapshot(r) for r in rows], nxt)

    async def count_activities(
        self, queue: str, flt: ActivityFilter, *, cap: int = filters.COUNT_CAP
    ) -> ActivityCount:
        flt = filters.check_filter(flt)
        cap = filters.check_cap(cap)
        return await self._call(self._in_read, _count, queue, flt, cap)

    def _in_read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` in one read transaction: one snapshot for every statement."""
        conn = self._conn
        conn.execute("BEGIN")
        try:
            return fn(conn, *args)
        finally:
            conn.execute("COMMIT")

    async def _act(self, queue: str, flt: ActivityFilter, action: str, limit: int, *extra: Any) -> ActionResult:
        flt = filters.check_filter(flt)
        limit = filters.check_action_limit(limit)
        result: ActionResult = await self._write(_ACTIONS[action], queue, flt, limit, _now_ms(), *extra)
        if result.changed:
            if action in ("retry", "run_now", "set_priority"):
                self._wake_work(queue)
            if action == "cancel":
                self._schedule_lookup()
            self._wake_streams()
            self._tell_siblings()
        return result

    async def retry_activities(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        return await self._act(queue, flt, "retry", limit)

    async def cancel_activities(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        return await self._act(queue, flt, "cancel", limit)

    async def run_now(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        return await self._act(queue, flt, "run_now", limit)

    async def set_priority(
        self, queue: str, flt: ActivityFilter, priority: int, *, limit: int = 10_000
    ) -> ActionResult:
        return await self._act(queue, flt, "set_priority", limit, filters.check_priority(priority))

    async def delete_activities(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        return await self._act(queue, flt, "delete", limit)

    # ------------------------------------------------------------ retention
    async def prune(self, queue: str, statuses: Sequence[str], older_than_ms: int, *, limit: int = 1000) -> int:
        wanted = check_prune(statuses, older_than_ms, limit)
        if not wanted:
            return 0
        n: int = await self._write(_prune, queue, wanted, _now_ms() - older_than_ms, limit)
        return n

    async def prune_events(self, queue: str, older_than_ms: int, *, limit: int = 1000) -> int:
        check_prune_events(older_than_ms, limit)
        n: int = await self._write(_prune_events, queue, _now_ms() - older_than_ms, limit)
        return n

    async def hold(self, queue: str, purpose: str, holder: str, ttl_ms: int) -> bool:
        check_hold(purpose, ttl_ms)
        held: bool = await self._write(_hold, queue, purpose, holder, ttl_ms, _now_ms())
        return held


# ------------------------------------------------- work done on the thread
def _connect(path: str, read_only: bool, busy_timeout: float, synchronous: str, migrate: bool) -> sqlite3.Connection:
    """Open and configure the connection (runs on the backend's thread)."""
    try:
        if read_only:
            conn = sqlite3.connect(
                f"file:{_uri_path(path)}?mode=ro", uri=True, timeout=busy_timeout, isolation_level=None,
                check_same_thread=False,
            )
        else:
            conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise BackendError(f"cannot open SQLite database {path!r}: {exc}") from None
    try:
        try:
            # Reads the header first: a file that is not a database fails here, untouched.
            conn.execute("PRAGMA schema_version").fetchone()
        except sqlite3.DatabaseError as exc:
            name = getattr(exc, "sqlite_errorname", "")
            if name in ("SQLITE_NOTADB", "SQLITE_CORRUPT"):
                raise ConfigError(f"{path!r} is not a SQLite database ({exc}); it was left untouched") from None
            # a database SQLite cannot read now: locked by another process past the busy timeout, or a
            # read-only directory where the WAL index cannot be made (SQLITE_READONLY_DIRECTORY)
            raise BackendError(f"cannot read SQLite database {path!r}: {exc} ({name or type(exc).__name__})") from None
        if read_only:
            if conn.execute(Q["has_schema"]).fetchone() is None:
                raise ConfigError(
                    f"no runnerq-fast schema in SQLite database {path!r}; "
                    "create it with `runnerq-fast migrate --backend URL`"
                )
            return conn
        deadline = time.monotonic() + busy_timeout
        mode = _retry_busy(lambda: conn.execute("PRAGMA journal_mode").fetchone()[0], deadline)
        if str(mode).lower() != "wal":
            # Switching needs an exclusive lock, for which SQLite does not call the busy handler.
            mode = _retry_busy(lambda: conn.execute("PRAGMA journal_mode=WAL").fetchone()[0], deadline)
        if str(mode).lower() != "wal":
            raise BackendError(f"cannot switch {path!r} to WAL mode (journal_mode stays {mode!r})")
        conn.execute(f"PRAGMA synchronous={synchronous}")  # a validated keyword, not a value
        if migrate:
            _retry_busy(lambda: _apply_migrations(conn, f"SQLite database {path!r}"), deadline)
    except ConfigError:
        conn.close()
        raise
    except sqlite3.Error as exc:
        conn.close()
        raise BackendError(f"cannot prepare SQLite database {path!r}: {exc}") from None
    except BaseException:
        conn.close()
        raise
    return conn


def _retry_busy(fn: Callable[[], T], deadline: float) -> T:
    """``fn()``, retried while another connection holds a lock SQLite will not wait for."""
    delay = 0.001
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorname", "") not in ("SQLITE_BUSY", "SQLITE_LOCKED") or (
                time.monotonic() + delay > deadline
            ):
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _uri_path(path: str) -> str:
    return quote(os.path.abspath(path))


def _enqueue(
    conn: sqlite3.Connection | sqlite3.Cursor, queue: str, items: Sequence[NewActivity], now: int
) -> tuple[list[EnqueueResult], bool]:
    results: list[EnqueueResult] = []
    rows: list[tuple[Any, ...]] = []
    events: list[tuple[str, str, str | None]] = []
    creating: set[str] = set()
    created = False
    for it in items:
        if it.idempotency_key is not None:
            holder = _idempotent_holder(conn, queue, it, now, creating)
            if holder is not None:
                rejected = it.on_duplicate == OnDuplicate.NO_REUSE
                results.append(EnqueueResult(holder, EnqueueOutcome.REJECTED if rejected else EnqueueOutcome.EXISTING))
                continue
            conn.execute(
                Q["idempotency_put"],
                (queue, it.activity_type, it.idempotency_key, it.id, now + it.idempotency_ttl_ms),
            )
            creating.add(it.id)
        later = it.run_at_ms > now
        status = "scheduled" if later else "pending"
        created = True
        rows.append((
            it.id, queue, it.activity_type, status, it.priority, it.max_retries, it.timeout_ms,
            it.payload.decode(), it.metadata.decode(), now, it.run_at_ms if later else now, it.idempotency_key,
            it.parent_id,
        ))
        events.append((it.id, "enqueued", None))
        if later:
            events.append((it.id, "scheduled", None))
        results.append(EnqueueResult(it.id, EnqueueOutcome.CREATED))
    if rows:
        conn.executemany(Q["insert_activity"], rows)
        _insert_event_runs(conn, queue, now, events)
    return results, created


def _idempotent_holder(
    conn: sqlite3.Connection | sqlite3.Cursor, queue: str, it: NewActivity, now: int, creating: set[str]
) -> str | None:
    """The activity that keeps ``it`` from being created, or ``None`` to create it.

    Runs under the write lock, so the decision and the key update are atomic.
    """
    row = conn.execute(Q["idempotency_get"], (queue, it.activity_type, it.idempotency_key)).fetchone()
    if row is None or row[1] <= now:
        return None
    holder: str = row[0]
    beh = it.on_duplicate
    if beh == OnDuplicate.ALLOW_REUSE:
        return None
    if holder in creating:
        status: str | None = "pending"
    else:
        found = conn.execute(Q["activity_status"], (holder,)).fetchone()
        status = None if found is None else found[0]
    if status is None:
        return None  # the holder is gone (pruned): the key is free
    if beh == OnDuplicate.ALLOW_REUSE_ON_FAILURE and status in _REUSABLE:
        return None
    return holder


def _types_json(activity_types: Sequence[str] | None) -> str | None:
    """A type filter as the JSON array the queries read with json_each() (``None``: any type)."""
    return None if activity_types is None else _json(list(activity_types)).decode()


def _plain_row(r: Sequence[Any]) -> bool:
    """A claimed row whose columns all have their usual types (then :func:`rowcheck.reason` finds nothing).

    Integers where the claim reads integers and text where it reads text:
    the check of every row of every claim, without building the mapping
    ``rowcheck.reason`` reads; a row it does not pass (a BLOB payload, a
    corrupt one) is checked by ``rowcheck.reason`` as before.
    """
    return (
        type(r[3]) is int and type(r[4]) is int and type(r[5]) is int and type(r[6]) is int and type(r[8]) is int
        and type(r[9]) is int and type(r[1]) is str and type(r[2]) is str and type(r[7]) is str
    )


def _claim(
    conn: sqlite3.Connection,
    queue: str,
    worker_id: str,
    token: str,
    limit: int,
    types: str | None,
    lease_ms: int,
    now: int,
    query: str = "claim",
) -> list[Any]:
    rows: list[Any] = []
    again = False  # a corrupt row was read: the next read's rows may sort among the earlier ones
    for _ in range(_CLAIM_ROUNDS):  # a corrupt row is dead-lettered; its place goes to the next one
        got = conn.execute(Q[query], (queue, now, types, limit - len(rows))).fetchall()
        if not got:
            break
        # every row read is marked held, as one UPDATE ... RETURNING did; a corrupt one is then dead-lettered
        conn.execute(Q["claim_set"], (token, worker_id, now, now + lease_ms, _json([r[10] for r in got]).decode()))
        bad = 0
        for r in got:
            if _plain_row(r):
                rows.append(r)
                continue
            why = rowcheck.reason(
                {"activity_type": r[1], "payload": r[2], "priority": r[3], "retry_count": r[4], "max_retries": r[5],
                 "timeout_ms": r[6], "metadata": r[7], "created_at_ms": r[8], "ready_at_ms": r[9]}
            )
            if why is None:
                rows.append(r)
            else:
                bad += 1
                _dead_letter_corrupt(conn, queue, r[0], why, now)
        if not bad or len(rows) >= limit:
            break
        again = True
    if not rows:
        return rows
    if again:  # each read returns its rows in claim order
        rows.sort(key=lambda r: (-r[3], -r[4], r[9], r[10]))
    _insert_events(conn, queue, now, [r[0] for r in rows], "claimed", worker_id)
    return rows


def _insert_events(
    conn: sqlite3.Connection | sqlite3.Cursor,
    queue: str,
    now: int,
    ids: Sequence[str],
    event_type: str,
    detail: str | None,
) -> None:
    """One ``event_type`` event per id of ``ids``, in order, all with ``detail``, in one statement."""
    if len(ids) == 1:
        conn.execute(Q["insert_event"], (ids[0], queue, event_type, now, detail))
    elif ids:
        conn.execute(Q["insert_events"], (_json(list(ids)).decode(), queue, event_type, now, detail))


def _insert_event_runs(
    conn: sqlite3.Connection | sqlite3.Cursor, queue: str, now: int, events: list[tuple[str, str, str | None]]
) -> None:
    """``events`` ((activity id, type, detail) each) in order: one statement per run sharing type and detail."""
    start = 0
    while start < len(events):
        _, kind, detail = events[start]
        end = start + 1
        while end < len(events) and events[end][1] == kind and events[end][2] == detail:
            end += 1
        _insert_events(conn, queue, now, [e[0] for e in events[start:end]], kind, detail)
        start = end


def _dead_letter_corrupt(conn: sqlite3.Connection, queue: str, activity_id: str, why: str, now: int) -> None:
    log.error("dead-lettering activity %s of queue %r: %s", activity_id, queue, why)
    conn.execute(Q["dead_letter_corrupt"], (activity_id, why, now))
    conn.execute(Q["insert_event"], (activity_id, queue, "dead_letter", now, why))


def _held(
    conn: sqlite3.Connection, refs: Sequence[Ack] | Sequence[LeaseRef] | Sequence[ProgressUpdate]
) -> dict[str, tuple[str, bool]]:
    """The ones of ``refs`` still processing: id -> (claim token, cancel requested)."""
    ids = _json([r.id for r in refs]).decode()
    return {r[0]: (r[1], bool(r[2])) for r in conn.execute(Q["held"], (ids,))}


def _ack(conn: sqlite3.Connection, queue: str, acks: Sequence[Ack], now: int) -> tuple[list[str], bool, bool]:
    """Apply ``acks``; returns (rejected ids, whether some were retried, whether some finished).

    Plain completions (no error, a claim token of 32 characters: this
    backend's) go through one ``ack_completed`` statement, the others through
    ``ack`` once each; a batch that names an id twice goes through ``ack``
    whole (the first ack of an id whose claim is held is the one applied).
    """
    if len({a.id for a in acks}) != len(acks):
        return _ack_each(conn, queue, acks, now)
    plain: list[Ack] = []
    rest: list[Ack] = []
    for a in acks:
        is_plain = a.outcome == AckOutcome.COMPLETED and a.error is None and len(a.claim_token) == 32
        (plain if is_plain else rest).append(a)
    if not plain:
        return _ack_each(conn, queue, acks, now)
    arg = _json({a.claim_token + a.id: _text(a.result) for a in plain}).decode()
    # (a statement that raises leaves this savepoint to the caller's rollback of the whole write)
    conn.execute("SAVEPOINT runnerq_ack")
    stale: list[str] = []
    if conn.execute(Q["ack_completed"], (arg, now)).rowcount == len(plain):
        applied = [a.id for a in plain]
    else:  # some are stale: which ones, from the statement that names the rows it changes
        conn.execute("ROLLBACK TO runnerq_ack")
        done = {r[0] for r in conn.execute(Q["ack_completed_ids"], (arg, now))}
        applied = [a.id for a in plain if a.id in done]
        stale = [a.id for a in plain if a.id not in done]
    conn.execute("RELEASE runnerq_ack")
    rejected, retried, finished = _ack_each(conn, queue, rest, now) if rest else ([], False, False)
    if applied:
        _insert_events(conn, queue, now, applied, "completed", None)
    return stale + rejected, retried, finished or bool(applied)


def _ack_each(conn: sqlite3.Connection, queue: str, acks: Sequence[Ack], now: int) -> tuple[list[str], bool, bool]:
    """:func:`_ack` through one ``ack`` statement per accepted ack."""
    held = _held(conn, acks)
    rejected: list[str] = []
    updates: list[tuple[Any, ...]] = []
    events: list[tuple[str, str, str | None]] = []
    tracebacks: dict[int, str] = {}  # position in events -> the failed attempt's traceback (its event keeps it)
    retried = finished = False
    for a in acks:
        h = held.get(a.id)
        if h is None or h[0] != a.claim_token:
            rejected.append(a.id)
            continue
        del held[a.id]  # a repeated id is accepted once
        o = a.outcome
        if o == AckOutcome.RETRY and h[1]:
            o = AckOutcome.CANCELLED  # an operator asked to cancel it: it is not retried
        updates.append((o, _text(a.result), a.error, a.retry_at_ms, now, a.id, a.claim_token, a.traceback))
        if o == AckOutcome.COMPLETED:
            events.append((a.id, "completed", None))
            finished = True
        elif o == AckOutcome.CANCELLED:
            events.append((a.id, "cancelled", None))
            finished = True
        elif o == AckOutcome.RETRY:
            if a.traceback is not None:
                tracebacks[len(events)] = a.traceback
            events.append((a.id, "retrying", a.error))
            retried = True
        else:
            if a.traceback is not None:
                tracebacks[len(events)] = a.traceback
            events.append((a.id, "failed" if o == AckOutcome.FAILED else "dead_letter", a.error))
            finished = True
    if updates:
        conn.executemany(Q["ack"], updates)
        if tracebacks:
            _insert_failure_events(conn, queue, now, events, tracebacks)
        else:
            _insert_event_runs(conn, queue, now, events)
    return rejected, retried, finished


def _insert_failure_events(
    conn: sqlite3.Connection,
    queue: str,
    now: int,
    events: list[tuple[str, str, str | None]],
    tracebacks: dict[int, str],
) -> None:
    """:func:`_insert_event_runs` of an ack with failed attempts: the events at the positions of
    ``tracebacks`` keep their traceback (one statement each), the others go in runs, all in order."""
    start = 0
    for i in sorted(tracebacks):
        _insert_event_runs(conn, queue, now, events[start:i])
        activity_id, kind, detail = events[i]
        conn.execute(Q["insert_event_traceback"], (activity_id, queue, kind, now, detail, tracebacks[i]))
        start = i + 1
    _insert_event_runs(conn, queue, now, events[start:])


def _extend(
    conn: sqlite3.Connection, queue: str, leases: Sequence[LeaseRef], lease_ms: int, now: int
) -> LeaseReport:
    held = _held(conn, leases)
    until = now + lease_ms
    lost: list[str] = []
    stop: list[str] = []
    kept: list[LeaseRef] = []
    for ref in leases:
        h = held.get(ref.id)
        if h is not None and h[0] == ref.claim_token:
            kept.append(ref)
            if h[1]:
                stop.append(ref.id)
        else:
            lost.append(ref.id)
    if kept:
        conn.executemany(Q["extend_lease"], [(until, r.id, r.claim_token) for r in kept])
        conn.executemany(Q["insert_event"], [(r.id, queue, "lease_extended", now, str(until)) for r in kept])
    return LeaseReport(lost, stop)


def _set_progress(conn: sqlite3.Connection, queue: str, updates: Sequence[ProgressUpdate], now: int) -> list[str]:
    """Write the progress of the held ones of ``updates``, each with a ``progress`` event; returns the others."""
    held = _held(conn, updates)
    kept: list[ProgressUpdate] = []
    lost: list[str] = []
    for u in updates:
        h = held.get(u.id)
        if h is not None and h[0] == u.claim_token:
            kept.append(u)
        else:
            lost.append(u.id)
    if kept:
        conn.executemany(Q["set_progress"], [(u.progress, u.id, u.claim_token) for u in kept])
        conn.executemany(Q["insert_event"], [(u.id, queue, "progress", now, u.progress) for u in kept])
    return lost


def _release(conn: sqlite3.Connection, queue: str, leases: Sequence[LeaseRef], now: int) -> tuple[list[str], bool]:
    """Release held ``leases``; those asked to cancel end cancelled. Returns (ids, whether some were cancelled)."""
    held = _held(conn, leases)
    kept: list[LeaseRef] = []
    stop: list[str] = []
    for ref in leases:
        h = held.get(ref.id)
        if h is not None and h[0] == ref.claim_token:
            del held[ref.id]
            if h[1]:
                stop.append(ref.id)
            else:
                kept.append(ref)
    done = [r.id for r in kept]
    if kept:
        conn.executemany(Q["release"], [(r.id, r.claim_token) for r in kept])
        conn.executemany(Q["insert_event"], [(i, queue, "requeued", now, "released at shutdown") for i in done])
    if stop:
        conn.executemany(Q["cancel_held"], [(i, now) for i in stop])
        conn.executemany(Q["insert_event"], [(i, queue, "cancelled", now, "released at shutdown") for i in stop])
    return done + stop, bool(stop)


def _reap(conn: sqlite3.Connection, queue: str, limit: int, now: int) -> tuple[list[str], list[str], list[str]]:
    rows = []
    corrupt = []
    for r in conn.execute(Q["expired"], (queue, now, limit)).fetchall():
        why = rowcheck.reason(
            {"retry_count": r[1], "max_retries": r[2], "priority": r[4], "timeout_ms": r[5], "created_at_ms": r[6],
             "ready_at_ms": r[7], "lease_expires_at_ms": r[8]}
        )
        if why is None:
            rows.append(r)
        else:
            _dead_letter_corrupt(conn, queue, r[0], why, now)
            corrupt.append(r[0])
    stop = [r[0] for r in rows if r[3]]
    rows = [r for r in rows if not r[3]]
    if stop:
        conn.executemany(Q["cancel_held"], [(i, now) for i in stop])
        conn.executemany(Q["insert_event"], [(i, queue, "cancelled", now, "lease expired") for i in stop])
    # only a suspect's expiry counts an attempt (it was claimed alone); the others become suspects
    requeued = [r for r in rows if not (r[9] and r[1] + 1 > r[2])]
    dead = [r[0] for r in rows if r[9] and r[1] + 1 > r[2]]
    if requeued:
        conn.executemany(Q["reap_requeue"], [(r[0], LEASE_EXPIRED_UNCHARGED) for r in requeued])
        conn.executemany(Q["insert_event"], [
            (r[0], queue, "requeued", now, "lease expired" if r[9] else LEASE_EXPIRED_UNCHARGED) for r in requeued
        ])
    if dead:
        err = "lease expired; retries exhausted"
        conn.executemany(Q["reap_dead"], [(i, now) for i in dead])
        conn.executemany(Q["insert_event"], [(i, queue, "dead_letter", now, err) for i in dead])
    return [r[0] for r in requeued], dead + corrupt, stop


def _cancel(conn: sqlite3.Connection, activity_id: str, now: int) -> bool:
    row = conn.execute(Q["cancel"], (activity_id, now)).fetchone()
    if row is None:
        return False
    conn.execute(Q["insert_event"], (activity_id, row[0], "cancelled", now, None))
    return True


# ------------------------------------------------- listings (on the thread)
# Key rows from the scan_* blocks: (id, created_at, status, priority, metadata, activity_type, parent_id).
_BIG = 2**62


def _key(r: Sequence[Any]) -> tuple[int, str]:
    return (r[1], r[0])


def _scan(
    conn: sqlite3.Connection, queue: str, flt: ActivityFilter, at: filters.Cursor | None, newest_first: bool
) -> tuple[Iterator[Any], list[sqlite3.Cursor]]:
    """The rows ``flt`` selects by index, in listing order after ``at``; and the cursors to close."""
    lo = -1 if flt.created_after_ms is None else flt.created_after_ms
    hi = _BIG if flt.created_before_ms is None else flt.created_before_ms
    if at is not None:
        c, cid = at.created, at.id
    else:
        c, cid = (_BIG, "") if newest_first else (-1, "")
    d = "desc" if newest_first else "asc"
    cursors: list[sqlite3.Cursor] = []
    if flt.ids is not None:
        rows = conn.execute(Q["scan_ids"], (queue, _json(list(flt.ids)).decode())).fetchall()
        if newest_first:
            rows = [r for r in rows if lo <= r[1] < hi and (r[1], r[0]) < (c, cid)]
        else:
            rows = [r for r in rows if lo <= r[1] < hi and (r[1], r[0]) > (c, cid)]
        rows.sort(key=_key, reverse=newest_first)
        sources: list[Any] = [rows]
    elif flt.parent_id is not None:
        cursors.append(conn.execute(Q[f"scan_parent_{d}"], (queue, flt.parent_id, lo, hi, c, cid)))
        sources = list(cursors)
    else:
        statuses = flt.statuses if flt.statuses is not None else filters.ALL_STATUSES
        if flt.activity_types is not None:
            for t in flt.activity_types:
                for st in statuses:
                    name = f"scan_processing_{d}" if st == "processing" else f"scan_type_{d}"
                    cursors.append(conn.execute(Q[name], (queue, st, lo, hi, c, cid, t)))
        else:
            for st in statuses:
                if st == "processing":  # not in status_created_idx (migration 0010): one range per type
                    for (t,) in conn.execute(Q["processing_types"], (queue,)).fetchall():
                        cursors.append(conn.execute(Q[f"scan_processing_{d}"], (queue, st, lo, hi, c, cid, t)))
                else:
                    cursors.append(conn.execute(Q[f"scan_status_{d}"], (queue, st, lo, hi, c, cid)))
        sources = list(cursors)
    rows_iter = keyset.merged(sources, _key, newest_first)
    return (r for r in rows_iter if _indexed(r, flt)), cursors


def _indexed(r: Sequence[Any], flt: ActivityFilter) -> bool:
    """The index-served conditions, for sources that do not apply them all (ids, parent)."""
    return (
        (flt.statuses is None or r[2] in flt.statuses)
        and (flt.activity_types is None or r[5] in flt.activity_types)
        and (flt.parent_id is None or r[6] == flt.parent_id)
    )


def _row_ok(flt: ActivityFilter) -> Callable[[Sequence[Any]], bool] | None:
    if not filters.row_filters(flt):
        return None
    priorities, pairs = flt.priorities, flt.metadata

    def ok(r: Sequence[Any]) -> bool:
        if priorities is not None and r[3] not in priorities:
            return False
        return not pairs or filters.metadata_matches(decode_json(r[4]), pairs)

    return ok


def _close(cursors: list[sqlite3.Cursor]) -> None:
    for cur in cursors:
        cur.close()


def _query(
    conn: sqlite3.Connection,
    queue: str,
    flt: ActivityFilter,
    limit: int,
    at: filters.Cursor | None,
    newest_first: bool,
) -> tuple[list[Any], tuple[int, str] | None]:
    rows, cursors = _scan(conn, queue, flt, at, newest_first)
    try:
        keys, last = keyset.page(rows, limit, _key, _row_ok(flt))
    finally:
        _close(cursors)
    if not keys:
        return [], last
    found = {r[0]: r for r in conn.execute(Q["snapshots_by_ids"], (_json([k[0] for k in keys]).decode(),))}
    return [found[k[0]] for k in keys if k[0] in found], last


def _count(conn: sqlite3.Connection, queue: str, flt: ActivityFilter, cap: int) -> ActivityCount:
    if flt.ids is None and flt.parent_id is None and not filters.row_filters(flt):
        # counted in the index ranges themselves, at most cap + 1 entries in all
        lo = -1 if flt.created_after_ms is None else flt.created_after_ms
        hi = _BIG if flt.created_before_ms is None else flt.created_before_ms
        statuses = flt.statuses if flt.statuses is not None else filters.ALL_STATUSES
        # the listing indexes leave out processing rows: those have an index of their own (migration 0010)
        ranges: list[tuple[str, tuple[Any, ...]]] = (
            [("count_processing_type" if st == "processing" else "count_type", (st, t))
             for t in flt.activity_types for st in statuses]
            if flt.activity_types is not None
            else [("count_processing" if st == "processing" else "count_status", (st,)) for st in statuses]
        )
        total = 0
        for name, key in ranges:
            params = (queue, key[0], lo, hi, cap + 1 - total, *key[1:])
            total += conn.execute(Q[name], params).fetchone()[0]
            if total > cap:
                return ActivityCount(cap, False)
        return ActivityCount(total, True)
    rows, cursors = _scan(conn, queue, flt, None, True)
    try:
        return keyset.count(rows, cap, _row_ok(flt))
    finally:
        _close(cursors)


def _register_worker(conn: sqlite3.Connection, params: tuple[Any, ...], now: int) -> None:
    conn.execute(Q["expire_workers"], (now,))
    conn.execute(Q["register_worker"], params)


def _execute(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> None:
    conn.execute(sql, params)


def _execute_many(conn: sqlite3.Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
    conn.executemany(sql, rows)


def _worker(r: Sequence[Any]) -> WorkerInfo:
    return WorkerInfo(
        worker_id=r[0], queue=r[1], host=r[2], pid=r[3], activity_types=tuple(msgspec.json.decode(r[4])),
        in_flight=r[5], concurrency=r[6], started_at_ms=r[7], last_seen_ms=r[8],
    )


def _list_queues(conn: sqlite3.Connection, now: int) -> list[QueueSummary]:
    out: list[QueueSummary] = []
    for (name,) in conn.execute(Q["queue_names"]).fetchall():
        counts = QueueStats(**{r[0]: r[1] for r in conn.execute(Q["stats"], (name,))})
        by_type: dict[str, dict[str, int]] = {}
        for typ, status, n in conn.execute(Q["counts_by_type"], (name,)):
            by_type.setdefault(typ, {})[status] = n
        oldest: int | None = None
        for priority in (4, 3, 2, 1):
            bound = _BIG
            while True:
                head = conn.execute(Q["ready_head"], (name, priority, bound)).fetchone()
                if head is None:
                    break
                bound, ready = head
                if ready <= now and (oldest is None or ready < oldest):
                    oldest = ready
        out.append(QueueSummary(name, counts, by_type, oldest))
    return out


# -------------------------------------------------- actions (on the thread)
def _select(
    conn: sqlite3.Connection, queue: str, flt: ActivityFilter, action: str, limit: int
) -> tuple[list[Any], int]:
    """Up to ``limit`` key rows ``action`` applies to (newest first), and how many matched but are skipped."""
    act, skip = filters.applicable(action, flt)
    picked: list[Any] = []
    if act:
        sub = msgspec.structs.replace(flt, statuses=act)
        rows, cursors = _scan(conn, queue, sub, None, True)
        ok = _row_ok(sub)
        try:
            for r in rows:
                if ok is None or ok(r):
                    picked.append(r)
                    if len(picked) == limit:
                        break
        finally:
            _close(cursors)
    skipped = _count(conn, queue, msgspec.structs.replace(flt, statuses=skip), limit).count if skip else 0
    return picked, skipped


def _retry(conn: sqlite3.Connection, queue: str, flt: ActivityFilter, limit: int, now: int) -> ActionResult:
    rows, skipped = _select(conn, queue, flt, "retry", limit)
    conn.executemany(Q["retry_one"], [(r[0], now) for r in rows])
    conn.executemany(Q["insert_event"], [(r[0], queue, "retry_requested", now, r[2]) for r in rows])
    return ActionResult("retry", [r[0] for r in rows], skipped)


def _cancel_many(conn: sqlite3.Connection, queue: str, flt: ActivityFilter, limit: int, now: int) -> ActionResult:
    rows, skipped = _select(conn, queue, flt, "cancel", limit)
    changed: list[str] = []
    events: list[tuple[Any, ...]] = []
    for r in rows:
        if r[2] == "processing":
            if conn.execute(Q["request_cancel"], (r[0], now)).rowcount == 0:
                skipped += 1  # already asked
                continue
            events.append((r[0], queue, "cancel_requested", now, None))
        else:
            conn.execute(Q["cancel"], (r[0], now)).fetchall()
            events.append((r[0], queue, "cancelled", now, None))
        changed.append(r[0])
    conn.executemany(Q["insert_event"], events)
    return ActionResult("cancel", changed, skipped)


def _run_now(conn: sqlite3.Connection, queue: str, flt: ActivityFilter, limit: int, now: int) -> ActionResult:
    rows, skipped = _select(conn, queue, flt, "run_now", limit)
    conn.executemany(Q["run_now_one"], [(r[0], now) for r in rows])
    conn.executemany(Q["insert_event"], [(r[0], queue, "run_now", now, r[2]) for r in rows])
    return ActionResult("run_now", [r[0] for r in rows], skipped)


def _set_priority(
    conn: sqlite3.Connection, queue: str, flt: ActivityFilter, limit: int, now: int, priority: int
) -> ActionResult:
    rows, skipped = _select(conn, queue, flt, "set_priority", limit)
    same = [r for r in rows if r[3] == priority]
    rows = [r for r in rows if r[3] != priority]
    conn.executemany(Q["set_priority_one"], [(r[0], priority) for r in rows])
    conn.executemany(
        Q["insert_event"], [(r[0], queue, "priority_changed", now, f"{r[3]}->{priority}") for r in rows]
    )
    return ActionResult("set_priority", [r[0] for r in rows], skipped + len(same))


def _delete_finished(conn: sqlite3.Connection, queue: str, ids: Iterable[str]) -> list[str]:
    """Delete the finished ones among ``ids`` with their events and idempotency keys; return them."""
    changed: list[str] = []
    for activity_id in ids:
        gone = conn.execute(Q["delete_one"], (activity_id,)).fetchone()
        if gone is None:
            continue
        if gone[1] is not None:
            conn.execute(Q["delete_key"], (queue, gone[0], gone[1], activity_id))
        conn.execute(Q["delete_events"], (activity_id,))
        changed.append(activity_id)
    return changed


def _delete(conn: sqlite3.Connection, queue: str, flt: ActivityFilter, limit: int, now: int) -> ActionResult:
    rows, skipped = _select(conn, queue, flt, "delete", limit)
    changed = _delete_finished(conn, queue, (r[0] for r in rows))
    # the one row left of each: "deleted", for the live stream (get_events leaves it out)
    conn.executemany(Q["insert_event"], [(i, queue, "deleted", now, None) for i in changed])
    return ActionResult("delete", changed, skipped)


_ACTIONS: dict[str, Callable[..., ActionResult]] = {
    "retry": _retry,
    "cancel": _cancel_many,
    "run_now": _run_now,
    "set_priority": _set_priority,
    "delete": _delete,
}


# ------------------------------------------------ retention (on the thread)
def _prune(conn: sqlite3.Connection, queue: str, statuses: list[str], before: int, limit: int) -> int:
    """One prune batch: up to ``limit`` activities in ``statuses`` finished before ``before`` (ms)."""
    ids: list[str] = []
    for status in statuses:
        if len(ids) >= limit:
            break
        ids += [r[0] for r in conn.execute(Q["prune_pick"], (queue, status, before, limit - len(ids)))]
    return len(_delete_finished(conn, queue, ids))


def _prune_events(conn: sqlite3.Connection, queue: str, before: int, limit: int) -> int:
    return conn.execute(Q["prune_events"], (queue, before, limit)).rowcount


def _hold(conn: sqlite3.Connection, queue: str, purpose: str, holder: str, ttl_ms: int, now: int) -> bool:
    return conn.execute(Q["hold"], (queue, purpose, holder, now + ttl_ms, now)).fetchone() is not None
