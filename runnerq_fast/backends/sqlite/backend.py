"""SQLite backend: one file, any number of worker processes.

Every backend call is one job on ONE dedicated thread that owns the
connection, so blocking ``sqlite3`` calls never run on the event loop and a
call costs one thread hop however many statements it runs. Every write is one
``BEGIN IMMEDIATE`` transaction (SQLite's single write lock, waited for up to
the busy timeout), so a claim, an ack flush or an enqueue batch is atomic
across processes: claims are one ``UPDATE ... RETURNING`` over the dequeue
index, batches go through ``executemany``.

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
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import msgspec

from runnerq_fast.backends._waiters import discard_waiter
from runnerq_fast.backends.sqlfiles import load_migrations, load_queries
from runnerq_fast.errors import BackendError, ConfigError
from runnerq_fast.models import (
    Ack,
    AckOutcome,
    ActivityEvent,
    ActivityResult,
    ActivitySnapshot,
    ClaimedActivity,
    DeadLetterRecord,
    EnqueueOutcome,
    EnqueueResult,
    LeaseRef,
    NewActivity,
    OnDuplicate,
    QueueStats,
    ReapReport,
)
from runnerq_fast.storage import Backend
from runnerq_fast.urls import redact_url

__all__ = ["SqliteBackend", "apply_migrations", "sqlite_path"]

log = logging.getLogger(__name__)

_PACKAGE = __name__.rpartition(".")[0]
Q = load_queries(_PACKAGE)
T = TypeVar("T")

_STREAM_PAGE = 1000
_REUSABLE = frozenset({"failed", "dead_letter", "cancelled"})
_SYNCHRONOUS = ("off", "normal", "full", "extra")
_json = msgspec.json.encode

_OPEN: dict[str, weakref.WeakSet[SqliteBackend]] = {}
"""Instances open in this process, by the file's real path (for instant wakeups between them)."""


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
    together apply each migration exactly once.

    Parameters
    ----------
    conn : sqlite3.Connection
        In autocommit mode (``isolation_level=None``), not inside a transaction.

    Returns
    -------
    list of int
        Versions applied by this call (empty when already up to date).
    """
    applied_now: list[int] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(Q["create_migrations_table"])
        applied = {r[0] for r in conn.execute(Q["applied_migrations"])}
        for m in load_migrations(_PACKAGE):
            if m.version in applied:
                continue
            for statement in _split_script(m.sql):
                conn.execute(statement)
            conn.execute(Q["record_migration"], (m.version, m.name, _now_ms()))
            applied_now.append(m.version)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    if applied_now:
        log.info("applied runnerq SQLite migrations %s", applied_now)
    return applied_now


def _snapshot(r: Sequence[Any]) -> ActivitySnapshot:
    return ActivitySnapshot(
        r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15], r[16]
    )


def _event(r: Sequence[Any]) -> ActivityEvent:
    return ActivityEvent(r[0], r[1], r[2], r[3], r[4], r[5])


def _result(r: Sequence[Any]) -> ActivityResult:
    return ActivityResult(r[0], r[1], r[2], r[3])


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
        self._work: dict[str, asyncio.Event] = {}
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

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise BackendError(f"SQLite backend {self.path!r} is closed")
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` in one BEGIN IMMEDIATE transaction on the thread."""
        if self.read_only:
            raise BackendError(f"SQLite database {self.path!r} was opened read-only")
        return await self._call(self._in_transaction, fn, *args)

    def _in_transaction(self, fn: Callable[..., T], *args: Any) -> T:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            out = fn(conn, *args)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return out

    async def migrate(self) -> None:
        """Apply pending migrations (safe from many processes at once)."""
        if self.read_only:
            raise BackendError(f"SQLite database {self.path!r} was opened read-only")
        await self._call(apply_migrations, self._conn)

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
    def _work_event(self, queue: str) -> asyncio.Event:
        ev = self._work.get(queue)
        if ev is None:
            ev = self._work[queue] = asyncio.Event()
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
        results, ready = await self._write(_enqueue, queue, items, _now_ms())
        if ready:
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
        self._work_event(queue).clear()  # a wakeup during the query sets it again
        if limit <= 0:
            return []
        token = uuid.uuid4().hex
        types = None if activity_types is None else _json(list(activity_types)).decode()
        rows = await self._write(_claim, queue, worker_id, token, limit, types, lease_ms, _now_ms())
        if rows:
            self._wake_streams()
        return [ClaimedActivity(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], token, r[8], r[9]) for r in rows]

    async def ack(self, queue: str, acks: Sequence[Ack]) -> list[str]:
        if not acks:
            return []
        rejected, retry_ready, finished = await self._write(_ack, queue, acks, _now_ms())
        if retry_ready:
            self._wake_work(queue)
        if finished and self._waiters:
            self._schedule_lookup()
        if finished or retry_ready:
            self._tell_siblings()
        self._wake_streams()
        if rejected:
            log.info("rejected %d stale acks on queue %r (claim no longer held)", len(rejected), queue)
        return rejected

    async def extend_leases(self, queue: str, leases: Sequence[LeaseRef], lease_ms: int) -> list[str]:
        if not leases:
            return []
        lost: list[str] = await self._write(_extend, queue, leases, lease_ms, _now_ms())
        self._wake_streams()
        return lost

    async def release(self, queue: str, leases: Sequence[LeaseRef]) -> list[str]:
        if not leases:
            return []
        done: list[str] = await self._write(_release, queue, leases, _now_ms())
        if done:
            self._wake_work(queue)
            self._wake_streams()
            self._tell_siblings()
        return done

    async def requeue_expired(self, queue: str, limit: int) -> ReapReport:
        if limit <= 0:
            return ReapReport([], [])
        requeued, dead = await self._write(_reap, queue, limit, _now_ms())
        if requeued:
            self._wake_work(queue)
        if dead and self._waiters:
            self._schedule_lookup()
        if requeued or dead:
            self._wake_streams()
            self._tell_siblings()
            log.info("reaped queue %r: %d requeued, %d dead-lettered", queue, len(requeued), len(dead))
        return ReapReport(requeued, dead)

    async def wait_for_work(self, queue: str, timeout: float) -> None:
        ev = self._work_event(queue)
        if ev.is_set() or self._closed:
            return
        self._ensure_watch()
        self._idle_fetchers += 1
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ev.wait(), timeout)
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

    async def get_activity(self, activity_id: str) -> ActivitySnapshot | None:
        row = await self._call(self._fetchone, Q["get_activity"], (_norm_id(activity_id),))
        return None if row is None else _snapshot(row)

    async def get_events(self, activity_id: str) -> list[ActivityEvent]:
        rows = await self._call(self._fetchall, Q["get_events"], (_norm_id(activity_id),))
        return [_event(r) for r in rows]

    async def list_dead_letter(self, queue: str, offset: int = 0, limit: int = 50) -> list[DeadLetterRecord]:
        rows = await self._call(self._fetchall, Q["list_dead_letter"], (queue, offset, limit))
        return [DeadLetterRecord(_snapshot(r), r[15], r[17] or 0) for r in rows]

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
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self._stream_poll)
        finally:
            self._streams.discard(wake)


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
            raise ConfigError(f"{path!r} is not a SQLite database ({exc}); it was left untouched") from None
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
            _retry_busy(lambda: apply_migrations(conn), deadline)
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
    events: list[tuple[Any, ...]] = []
    creating: set[str] = set()
    ready = False
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
        ready = ready or not later
        rows.append((
            it.id, queue, it.activity_type, status, it.priority, it.max_retries, it.timeout_ms,
            it.payload.decode(), it.metadata.decode(), now, it.run_at_ms if later else now, it.idempotency_key,
        ))
        events.append((it.id, queue, "enqueued", now, None))
        if later:
            events.append((it.id, queue, "scheduled", now, None))
        results.append(EnqueueResult(it.id, EnqueueOutcome.CREATED))
    if rows:
        conn.executemany(Q["insert_activity"], rows)
        conn.executemany(Q["insert_event"], events)
    return results, ready


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


def _claim(
    conn: sqlite3.Connection,
    queue: str,
    worker_id: str,
    token: str,
    limit: int,
    types: str | None,
    lease_ms: int,
    now: int,
) -> list[Any]:
    rows = conn.execute(Q["claim"], (token, worker_id, now, now + lease_ms, queue, types, limit)).fetchall()
    if not rows:
        return rows
    rows.sort(key=lambda r: (-r[3], -r[4], r[9], r[10]))
    conn.executemany(Q["insert_event"], [(r[0], queue, "claimed", now, worker_id) for r in rows])
    return rows


def _held(conn: sqlite3.Connection, refs: Sequence[Ack] | Sequence[LeaseRef]) -> dict[str, str]:
    ids = _json([r.id for r in refs]).decode()
    return {r[0]: r[1] for r in conn.execute(Q["held"], (ids,))}


def _ack(conn: sqlite3.Connection, queue: str, acks: Sequence[Ack], now: int) -> tuple[list[str], bool, bool]:
    held = _held(conn, acks)
    rejected: list[str] = []
    updates: list[tuple[Any, ...]] = []
    events: list[tuple[Any, ...]] = []
    retry_ready = finished = False
    for a in acks:
        if held.get(a.id) != a.claim_token:
            rejected.append(a.id)
            continue
        del held[a.id]  # a repeated id is accepted once
        o = a.outcome
        updates.append((o, _text(a.result), a.error, a.retry_at_ms, now, a.id, a.claim_token))
        if o == AckOutcome.COMPLETED:
            events.append((a.id, queue, "completed", now, None))
            finished = True
        elif o == AckOutcome.RETRY:
            events.append((a.id, queue, "retrying", now, a.error))
            retry_ready = retry_ready or a.retry_at_ms <= now
        else:
            events.append((a.id, queue, "failed" if o == AckOutcome.FAILED else "dead_letter", now, a.error))
            finished = True
    if updates:
        conn.executemany(Q["ack"], updates)
        conn.executemany(Q["insert_event"], events)
    return rejected, retry_ready, finished


def _extend(conn: sqlite3.Connection, queue: str, leases: Sequence[LeaseRef], lease_ms: int, now: int) -> list[str]:
    held = _held(conn, leases)
    until = now + lease_ms
    lost: list[str] = []
    kept: list[LeaseRef] = []
    for ref in leases:
        if held.get(ref.id) == ref.claim_token:
            kept.append(ref)
        else:
            lost.append(ref.id)
    if kept:
        conn.executemany(Q["extend_lease"], [(until, r.id, r.claim_token) for r in kept])
        conn.executemany(Q["insert_event"], [(r.id, queue, "lease_extended", now, str(until)) for r in kept])
    return lost


def _release(conn: sqlite3.Connection, queue: str, leases: Sequence[LeaseRef], now: int) -> list[str]:
    held = _held(conn, leases)
    kept: list[LeaseRef] = []
    for ref in leases:
        if held.get(ref.id) == ref.claim_token:
            del held[ref.id]
            kept.append(ref)
    done = [r.id for r in kept]
    if kept:
        conn.executemany(Q["release"], [(r.id, r.claim_token) for r in kept])
        conn.executemany(Q["insert_event"], [(i, queue, "requeued", now, "released at shutdown") for i in done])
    return done


def _reap(conn: sqlite3.Connection, queue: str, limit: int, now: int) -> tuple[list[str], list[str]]:
    rows = conn.execute(Q["expired"], (queue, now, limit)).fetchall()
    requeued = [r[0] for r in rows if r[1] + 1 <= r[2]]
    dead = [r[0] for r in rows if r[1] + 1 > r[2]]
    if requeued:
        conn.executemany(Q["reap_requeue"], [(i,) for i in requeued])
        conn.executemany(Q["insert_event"], [(i, queue, "requeued", now, "lease expired") for i in requeued])
    if dead:
        err = "lease expired; retries exhausted"
        conn.executemany(Q["reap_dead"], [(i, now) for i in dead])
        conn.executemany(Q["insert_event"], [(i, queue, "dead_letter", now, err) for i in dead])
    return requeued, dead


def _cancel(conn: sqlite3.Connection, activity_id: str, now: int) -> bool:
    row = conn.execute(Q["cancel"], (activity_id, now)).fetchone()
    if row is None:
        return False
    conn.execute(Q["insert_event"], (activity_id, row[0], "cancelled", now, None))
    return True
