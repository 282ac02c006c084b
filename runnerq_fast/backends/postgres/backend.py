"""PostgreSQL backend on asyncpg.

Every batch operation is one statement (one round trip, one transaction):
claims use ``FOR UPDATE SKIP LOCKED`` on a partial index, acks and enqueues
pass parallel arrays through ``unnest``, and each statement writes its events
and results itself. Wakeups use LISTEN/NOTIFY on one dedicated connection
that reconnects by itself; the SQL lives in ``queries.sql`` and
``migrations/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import msgspec
from asyncpg.pool import PoolConnectionProxy

from runnerq_fast import filters
from runnerq_fast.backends import rowcheck
from runnerq_fast.backends._servercheck import first_check
from runnerq_fast.backends._waiters import discard_waiter
from runnerq_fast.backends._wakeups import WorkSignal
from runnerq_fast.backends.postgres import faults
from runnerq_fast.backends.postgres.listener import Listener
from runnerq_fast.backends.postgres.rows import ack_params, claimed_from_rows, enqueue_params, lease_params
from runnerq_fast.backends.postgres.sql import load_migrations, load_queries
from runnerq_fast.backends.sqlfiles import migration_report
from runnerq_fast.errors import BackendError, ConfigError, InvalidActivityError
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
from runnerq_fast.urls import password_hint, redact_text, redact_url

__all__ = ["RESULTS_CHANNEL", "WORK_CHANNEL", "PostgresBackend", "apply_migrations"]

log = logging.getLogger(__name__)


class _PoolFloorFilter(logging.Filter):
    """Drops asyncpg's "Failed to restore the pool connection floor" traceback, logged every 1-60 s of an outage.

    The backend reports an outage itself, one warning when its calls start
    failing and one when they succeed again (:class:`~runnerq_fast.resilience.StoreHealth`).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Failed to restore the pool connection floor")


_POOL_FLOOR_FILTER = _PoolFloorFilter()
logging.getLogger("asyncpg.pool").addFilter(_POOL_FLOOR_FILTER)

WORK_CHANNEL = "runnerq_work"
"""NOTIFY channel meaning "work may be ready"; the payload is the queue name."""

RESULTS_CHANNEL = "runnerq_results"
"""NOTIFY channel meaning "some activities ended"; the payload is the queue name."""

Q = load_queries()
_COMPLETED = int(AckOutcome.COMPLETED)
_STREAM_PAGE = 1000
_Conn = asyncpg.Connection | PoolConnectionProxy
_CONNECT_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError)


_FOLD_AT = 2_000
"""Delta rows a :meth:`PostgresBackend.stats` may read before it folds them into the counters."""

_MAX_STATEMENT_ITEMS = 100_000
"""Most activities one enqueue statement writes (an event batch names at most 2**20 - 1)."""


_CREATED = EnqueueOutcome.CREATED
"""Bound once: an enum member looked up on its class costs ``EnumType.__getattr__`` (Python 3.11), ~1 k instructions."""


def _duplicate(item: NewActivity, holder: str) -> EnqueueResult:
    """The result of ``item`` whose key ``holder`` keeps: REJECTED for NO_REUSE, else EXISTING."""
    return EnqueueResult(
        holder, EnqueueOutcome.REJECTED if item.on_duplicate == OnDuplicate.NO_REUSE else EnqueueOutcome.EXISTING
    )


def _hex(value: Any) -> str:
    """asyncpg's UUID → the 32-hex-digit form the engine uses."""
    return str(value.hex)


def _id_hex(activity_id: str) -> str:
    """An item's id in the form :func:`_hex` gives (the database accepted it as a uuid).

    Ids the engine makes are that form already (32 lowercase hex digits): no
    ``uuid.UUID`` round trip for them; anything else (dashes, braces, upper case) goes through one.
    """
    return activity_id if len(activity_id) == 32 and activity_id.islower() else uuid.UUID(activity_id).hex


def _uuid_or_none(value: str) -> str | None:
    try:
        return uuid.UUID(value).hex
    except (ValueError, TypeError, AttributeError):
        return None


def _text(data: bytes | str | None) -> str | None:
    if data is None or isinstance(data, str):
        return data
    return data.decode()


def _callers_connection(connection: object) -> _Conn:
    """``connection`` if it is an asyncpg connection inside a transaction, else :class:`ConfigError`."""
    if not isinstance(connection, asyncpg.Connection | PoolConnectionProxy):
        raise ConfigError(
            "connection= must be an asyncpg connection (asyncpg.Connection or one acquired from an asyncpg "
            f"pool) to the backend's database, got {type(connection).__name__}"
        )
    if not connection.is_in_transaction():
        raise ConfigError(
            "connection= must be inside a transaction (async with conn.transaction(): ...); "
            "to enqueue outside one, leave connection out"
        )
    return connection


def _snapshot(r: asyncpg.Record | Sequence[Any]) -> ActivitySnapshot:
    metadata, bad = rowcheck.shown_metadata(r[6])  # jsonb text; a hand edit may leave a non-object there
    return ActivitySnapshot(
        _hex(r[0]),
        r[1],
        r[2],
        r[3],
        r[4],
        r[5],
        metadata,
        r[7],
        r[8],
        r[9],
        r[10],
        r[11],
        r[12],
        r[13],
        r[14],
        r[15],
        r[16],
        None if r[17] is None else _hex(r[17]),
        corrupt=None if bad is None else rowcheck.PREFIX + bad,
    )


def _event(r: asyncpg.Record) -> ActivityEvent:
    return ActivityEvent(r[0], _hex(r[1]), r[2], r[3], r[4], r[5])


def _event_with_traceback(r: asyncpg.Record) -> ActivityEvent:
    """A get_events row of a failed attempt: :func:`_event` and its traceback (r[6])."""
    return ActivityEvent(r[0], _hex(r[1]), r[2], r[3], r[4], r[5], r[6])


def _result(r: asyncpg.Record) -> ActivityResult:
    return ActivityResult(_hex(r[0]), r[1], r[2], r[3], r[4])


async def _no_reset(conn: asyncpg.Connection) -> None:
    """Pool release hook that skips asyncpg's default reset round trip.

    The default (``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL``)
    costs one more round trip on every release, i.e. on every claim and ack.
    Pool connections here never hold session state: migrations take a
    transaction-scoped advisory lock, LISTEN runs on the dedicated listener
    connection, and no statement uses cursors or SET.
    """


async def apply_migrations(conn: _Conn) -> list[int]:
    """Apply the pending numbered migrations on ``conn``.

    All of it runs in one transaction holding ``pg_advisory_xact_lock``, so
    workers that start together apply each migration exactly once. A
    database that records versions this release does not ship (a newer
    runnerq-fast migrated it) is left as it is, with a warning
    (:func:`~runnerq_fast.backends.sqlfiles.migration_report`).

    Parameters
    ----------
    conn : asyncpg.Connection or pool connection
        Not inside a transaction.

    Returns
    -------
    list of int
        Versions applied by this call (empty when already up to date).
    """
    return list((await _apply_migrations(conn, "PostgreSQL database")).applied)


async def _apply_migrations(conn: _Conn, store: str) -> MigrationReport:
    """:func:`apply_migrations`, reporting what it found too; ``store`` names the database in the warning."""
    applied_now: list[int] = []
    migrations = load_migrations()
    async with conn.transaction():
        await conn.execute(Q["lock_migrations"])
        await conn.execute(Q["create_migrations_table"])
        applied = {r[0] for r in await conn.fetch(Q["applied_migrations"])}
        for m in migrations:
            if m.version in applied:
                continue
            await conn.execute(m.sql)
            await conn.execute(Q["record_migration"], m.version, m.name)
            applied_now.append(m.version)
    if applied_now:
        log.info("applied runnerq migrations %s", applied_now)
    return migration_report(log, store, migrations, applied, applied_now)


class _WorkNotifier:
    """Rate limit for the "work may be ready" NOTIFY, per queue.

    The leading edge goes out inside the enqueue statement itself (so it fires
    exactly at commit); later enqueues within ``interval`` seconds schedule
    one trailing NOTIFY at the end of the window, sent after they committed,
    so the last enqueue is never left unannounced.
    """

    def __init__(self, interval: float, pool: asyncpg.Pool) -> None:
        self.interval = interval
        self._pool = pool
        self._last: dict[str, float] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: Trailing notifications sent (for tests and metrics).
        self.trailing_sent = 0

    def take_leading(self, queue: str) -> bool:
        """Whether this enqueue may notify inline; records it if so."""
        now = asyncio.get_running_loop().time()
        if now - self._last.get(queue, -math.inf) >= self.interval and queue not in self._timers:
            self._last[queue] = now
            return True
        return False

    def committed_without_notify(self, queue: str) -> None:
        """An enqueue that did not notify inline has committed."""
        if queue in self._timers:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, self._last.get(queue, -math.inf) + self.interval - loop.time())
        self._timers[queue] = loop.call_later(delay, self._fire, queue)

    def _fire(self, queue: str) -> None:
        self._timers.pop(queue, None)
        self._last[queue] = asyncio.get_running_loop().time()
        task = asyncio.get_running_loop().create_task(self._send(queue))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, queue: str) -> None:
        try:
            await self._pool.execute(Q["notify_work"], queue)
            self.trailing_sent += 1
        except _CONNECT_ERRORS as exc:
            log.warning("trailing work notification for queue %r failed: %s", queue, exc)

    async def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class PostgresBackend(Backend):
    """Activities, events and results in PostgreSQL tables.

    Open with :meth:`open` (or :func:`runnerq_fast.connect`), not the
    constructor.

    Parameters
    ----------
    url : str
        The ``postgresql://`` URL the pool was made from.
    pool : asyncpg.Pool
        Connections for queries; the backend closes it.
    notify_interval : float
        Seconds between two "work ready" notifications of one queue from this
        instance. Default 0.005 s.
    stream_poll_interval : float
        Longest an :meth:`event_stream` waits between two queries when no
        notification arrives (claims and retries notify nothing). Default 0.5 s.
    async_claims : bool
        Commit claims without waiting for the WAL flush (``synchronous_commit``
        off for the claim's own transaction). Faster drains; a server crash can
        then forget the claims of its last < 1 s, whose activities may run
        again while their first run goes on. Default ``False``.
    """

    name = "postgresql"

    def __init__(
        self,
        url: str,
        pool: asyncpg.Pool,
        *,
        notify_interval: float = 0.005,
        stream_poll_interval: float = 0.5,
        async_claims: bool = False,
    ) -> None:
        self.url = url
        self._async_claims = bool(async_claims)
        self._pool = pool
        self._notifier = _WorkNotifier(notify_interval, pool)
        self._stream_poll = stream_poll_interval
        self._listener: Listener | None = None
        self._work: dict[str, WorkSignal] = {}
        self._streams: dict[str, set[asyncio.Event]] = {}
        self._waiters: dict[str, list[asyncio.Future[ActivityResult]]] = {}
        self._lookup_task: asyncio.Task[None] | None = None
        self._lookup_again = False
        self._closed = False

    # ------------------------------------------------------------ lifecycle
    @classmethod
    async def open(
        cls,
        url: str,
        *,
        min_size: int = 2,
        max_size: int = 10,
        migrate: bool = True,
        notify_interval: float = 0.005,
        stream_poll_interval: float = 0.5,
        connect_timeout: float = 10.0,
        async_claims: bool = False,
        **kw: Any,
    ) -> PostgresBackend:
        """Open a pool and the LISTEN connection, migrating first by default.

        Parameters
        ----------
        url : str
            ``postgresql://user[:password]@host[:port]/database`` (``postgres://`` too).
        min_size, max_size : int
            Pool size bounds, in connections. Defaults 2 and 10.
        migrate : bool
            Apply pending migrations before returning. Default ``True``.
        notify_interval : float
            See :class:`PostgresBackend`. Seconds.
        stream_poll_interval : float
            See :class:`PostgresBackend`. Seconds.
        connect_timeout : float
            Seconds allowed for each connection attempt. Default 10 s.
        async_claims : bool
            See :class:`PostgresBackend`. Default ``False`` (claims commit
            synchronously, like every other statement).
        **kw
            Passed to :func:`asyncpg.create_pool` (``ssl``, ``server_settings``, ...).

        Returns
        -------
        PostgresBackend

        Raises
        ------
        ConfigError
            If the URL is malformed.
        BackendError
            If the server cannot be reached or refuses the connection.
        """
        try:
            scheme = urlsplit(url).scheme.lower()
        except ValueError as exc:
            raise ConfigError(f"malformed backend URL {redact_url(url)!r}: {exc}{password_hint(url)}") from None
        if scheme not in ("postgresql", "postgres"):
            raise ConfigError(f"not a PostgreSQL URL: {redact_url(url)!r}")
        try:
            pool = await asyncpg.create_pool(
                url, min_size=min_size, max_size=max_size, timeout=connect_timeout, reset=_no_reset, **kw
            )
        except (ValueError, TypeError, asyncpg.ClientConfigurationError) as exc:
            raise ConfigError(f"invalid PostgreSQL URL {redact_url(url)!r}: {redact_text(str(exc), url)}"
                              f"{password_hint(url)}") from exc
        except (socket.gaierror, *_CONNECT_ERRORS) as exc:
            shown = redact_text(str(exc), url)
            raise BackendError(f"cannot connect to PostgreSQL at {redact_url(url)}: {shown}") from exc
        self = cls(url, pool, notify_interval=notify_interval, stream_poll_interval=stream_poll_interval,
                   async_claims=async_claims)
        try:
            if migrate:
                async with pool.acquire() as conn:
                    await _apply_migrations(conn, self._store_name())

            async def connect() -> asyncpg.Connection:
                return await asyncpg.connect(url, timeout=connect_timeout, **kw)

            self._listener = Listener(
                connect, (WORK_CHANNEL, RESULTS_CHANNEL), self._on_notify, self._on_listener_reconnect
            )
            await self._listener.start()
        except BaseException as exc:
            await self.close()
            if isinstance(exc, _CONNECT_ERRORS):
                raise BackendError(
                    f"PostgreSQL at {redact_url(url)} failed while opening: {redact_text(str(exc), url)}"
                ) from exc
            raise
        return self

    def _store_fault(self, exc: Exception) -> Fault | None:
        return faults.classify(exc)

    async def check_server(self) -> None:
        """Warn once per server and process (from the worker engine's start) if autovacuum is off.

        See :meth:`check_autovacuum`; a failure to read the setting is logged, not raised.
        """
        if not first_check(self.url):
            return
        try:
            await self.check_autovacuum()
        except Exception as exc:
            log.info("could not read the autovacuum setting (%s: %s)", type(exc).__name__, exc)

    async def check_autovacuum(self) -> bool | None:
        """Warn unless the server runs autovacuum; return whether it does.

        Every claim and ack leaves dead row versions in ``runnerq_activities``;
        without (auto)vacuum they pile up and each claim walks more of them, so
        throughput falls as the table ages. ``None`` if the setting cannot be read.
        """
        try:
            value = await self._pool.fetchval("SELECT current_setting('autovacuum')")
        except _CONNECT_ERRORS:
            return None
        on = str(value).lower() in ("on", "true", "1")
        if not on:
            log.warning(
                "autovacuum is off on this PostgreSQL server: dead rows of runnerq_activities will pile up "
                "and slow every claim; turn it on or VACUUM the runnerq tables regularly"
            )
        return on

    async def migrate(self) -> MigrationReport:
        """Apply pending migrations (safe to call from many workers at once).

        Returns
        -------
        MigrationReport
            The versions applied, and those the database records that this
            release does not know (also logged as a warning).
        """
        async with self._pool.acquire() as conn:
            return await _apply_migrations(conn, self._store_name())

    def _store_name(self) -> str:
        """The database as the migration warning names it (no password)."""
        return f"PostgreSQL database {redact_url(self.url)}"

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for ev in self._work.values():
            ev.set()
        for wakers in self._streams.values():
            for w in wakers:
                w.set()
        await self._notifier.close()
        task, self._lookup_task = self._lookup_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._listener is not None:
            await self._listener.close()
        try:
            await asyncio.wait_for(self._pool.close(), 5.0)
        except TimeoutError:
            self._pool.terminate()

    @property
    def pool(self) -> asyncpg.Pool:
        """The query pool (for tools and tests)."""
        return self._pool

    @property
    def listener(self) -> Listener | None:
        """The LISTEN connection's supervisor (for tests)."""
        return self._listener

    @property
    def trailing_notifications(self) -> int:
        """Trailing "work ready" notifications this instance has sent."""
        return self._notifier.trailing_sent

    # -------------------------------------------------------- notifications
    def _work_event(self, queue: str) -> WorkSignal:
        ev = self._work.get(queue)
        if ev is None:
            ev = self._work[queue] = WorkSignal()
        return ev

    def _wake_streams(self, queue: str | None) -> None:
        groups = self._streams.values() if queue is None else (self._streams.get(queue, ()),)
        for wakers in groups:
            for w in wakers:
                w.set()

    def _on_notify(self, channel: str, payload: str) -> None:
        if channel == WORK_CHANNEL:
            ev = self._work.get(payload)
            if ev is not None:
                ev.set()
        elif channel == RESULTS_CHANNEL:
            self._schedule_lookup()
        self._wake_streams(payload)

    def _on_listener_reconnect(self) -> None:
        # Anything may have happened while we were deaf: wake everybody.
        for ev in self._work.values():
            ev.set()
        self._wake_streams(None)
        self._schedule_lookup()

    def _schedule_lookup(self) -> None:
        if not self._waiters or self._closed:
            return
        self._lookup_again = True
        if self._lookup_task is None or self._lookup_task.done():
            self._lookup_task = asyncio.get_running_loop().create_task(self._lookup_results())

    async def _lookup_results(self) -> None:
        """Resolve every awaited id that has a result; one query per round.

        A lookup that fails on a connection error is retried (with backoff)
        while anyone still waits, so a result that arrived during an outage
        is not missed until the next notification.
        """
        delay = 0.1
        while self._lookup_again and self._waiters and not self._closed:
            self._lookup_again = False
            ids = list(self._waiters)
            try:
                rows = await self._pool.fetch(Q["get_results"], ids)
            except _CONNECT_ERRORS as exc:
                log.warning("result lookup failed, retrying in %.1f s (waiters stay registered): %s", delay, exc)
                self._lookup_again = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            delay = 0.1
            for r in rows:
                res = _result(r)
                for fut in self._waiters.get(res.activity_id, ()):
                    if not fut.done():
                        fut.set_result(res)

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
        connection : asyncpg.Connection or pool connection, optional
            The caller's connection to this backend's database, inside a
            transaction the caller opened (``async with conn.transaction():``).
            The rows, their events and the ``pg_notify`` are written in that
            transaction: PostgreSQL delivers the notification at commit and
            drops it (with the rows) at rollback. Keyed items lock their
            idempotency key row until the caller's transaction ends, so a
            concurrent enqueue of the same key waits for it, then sees the
            committed holder, or takes the key if it rolled back. Nothing runs
            outside the caller's transaction; a keyed batch runs under a
            savepoint. Errors are asyncpg's, as for any statement of the
            caller's (the transaction is then aborted).

        Raises
        ------
        ConfigError
            If ``connection`` is not an asyncpg connection, or is not inside a transaction.
        BackendError
            If this backend is closed.
        """
        if connection is not None:
            if self._closed:
                raise BackendError("the PostgreSQL backend is closed")
            return await self._enqueue_on(_callers_connection(connection), queue, items)
        if not items:
            return []
        if all(it.idempotency_key is None for it in items):
            if len(items) <= _MAX_STATEMENT_ITEMS:
                await self._insert(self._pool, queue, items)
            else:
                # several statements in one transaction: a cancelled one rolls back the batch whole, so the
                # call's retry (or the producer's split) never stores a part twice
                async with self._pool.acquire() as conn, conn.transaction():
                    for start in range(0, len(items), _MAX_STATEMENT_ITEMS):
                        await self._insert(conn, queue, items[start : start + _MAX_STATEMENT_ITEMS],
                                           commit_hook=False)
                self._after_commit(queue, False)
            return [EnqueueResult(it.id, _CREATED) for it in items]
        async with self._pool.acquire() as conn, conn.transaction():
            results = await self._claim_keys(conn, queue, items)
            created = [it for it, res in zip(items, results, strict=True) if res.outcome == _CREATED]
            for start in range(0, len(created), _MAX_STATEMENT_ITEMS):
                await self._insert(conn, queue, created[start : start + _MAX_STATEMENT_ITEMS], commit_hook=False)
        if created:
            self._after_commit(queue, False)
        return results

    async def _enqueue_on(self, conn: _Conn, queue: str, items: Sequence[NewActivity]) -> list[EnqueueResult]:
        """Enqueue on the caller's ``conn`` inside its transaction; the NOTIFY goes out at its commit."""
        if not items:
            return []
        if all(it.idempotency_key is None for it in items):
            for start in range(0, len(items), _MAX_STATEMENT_ITEMS):
                chunk = items[start : start + _MAX_STATEMENT_ITEMS]
                await conn.execute(Q["enqueue"], queue, *_enqueue_args(chunk), True, _parents(chunk))
            return [EnqueueResult(it.id, _CREATED) for it in items]
        async with conn.transaction():  # a savepoint in the caller's transaction
            results = await self._claim_keys(conn, queue, items)
            created = [it for it, res in zip(items, results, strict=True) if res.outcome == _CREATED]
            for start in range(0, len(created), _MAX_STATEMENT_ITEMS):
                chunk = created[start : start + _MAX_STATEMENT_ITEMS]
                await conn.execute(Q["enqueue"], queue, *_enqueue_args(chunk), True, _parents(chunk))
        return results

    async def _insert(
        self,
        conn: asyncpg.Pool | _Conn,
        queue: str,
        items: Sequence[NewActivity],
        *,
        commit_hook: bool = True,
    ) -> None:
        """One UNNEST insert of ``items`` with their events (and maybe the NOTIFY)."""
        leading = commit_hook and self._notifier.take_leading(queue)
        await conn.execute(Q["enqueue"], queue, *_enqueue_args(items), leading, _parents(items))
        if commit_hook:
            self._after_commit(queue, leading)

    def _after_commit(self, queue: str, notified: bool) -> None:
        ev = self._work.get(queue)
        if ev is not None:
            ev.set()  # wake this process's own fetcher without a round trip
        if not notified:
            self._notifier.committed_without_notify(queue)

    async def _claim_keys(self, conn: _Conn, queue: str, items: Sequence[NewActivity]) -> list[EnqueueResult]:
        """Decide every keyed item under its key's row lock; unkeyed items are CREATED.

        Set-based: one ``idempotency_claim`` for all the keys, then one
        ``idempotency_take_over`` for the items whose key another activity
        holds (not one round trip per key). Items that repeat a (type, key)
        of the batch go in later rounds, the n-th item of each key in round n,
        so each sees what the one before it did, as if the items went one at
        a time. The claim locks its keys in (type, key) order, so concurrent
        batches cannot deadlock; later rounds only touch keys already locked.
        """
        results: list[EnqueueResult | None] = [None] * len(items)
        keyed: dict[tuple[str, str], list[int]] = {}
        for i, it in enumerate(items):
            if it.idempotency_key is None:
                results[i] = EnqueueResult(it.id, _CREATED)
            else:
                keyed.setdefault((it.activity_type, it.idempotency_key), []).append(i)
        rounds = max((len(positions) for positions in keyed.values()), default=0)
        pending: set[str] = set()  # ids this batch creates (not yet inserted)
        for n in range(rounds):
            batch = [positions[n] for positions in keyed.values() if len(positions) > n]
            holders = await self._claim_round(conn, queue, [items[i] for i in batch])
            contested: list[tuple[int, str]] = []  # (item position, holder) that may take their key over
            for i, holder in zip(batch, holders, strict=True):
                new_id = _id_hex(items[i].id)
                if holder == new_id:
                    results[i] = EnqueueResult(items[i].id, _CREATED)
                    pending.add(new_id)
                elif holder in pending:
                    results[i] = _duplicate(items[i], holder)
                else:
                    contested.append((i, holder))
            if not contested:
                continue
            taken = await self._take_over(conn, queue, [(items[i], holder) for i, holder in contested])
            for i, holder in contested:
                new_id = _id_hex(items[i].id)
                if new_id in taken:
                    results[i] = EnqueueResult(items[i].id, _CREATED)
                    pending.add(new_id)
                else:
                    results[i] = _duplicate(items[i], holder)
        return [r for r in results if r is not None]

    async def _claim_round(self, conn: _Conn, queue: str, items: Sequence[NewActivity]) -> list[str]:
        """``idempotency_claim`` for ``items`` (no (type, key) twice): each one's key holder after it (hex)."""
        rows = await conn.fetch(
            Q["idempotency_claim"],
            queue,
            [it.activity_type for it in items],
            [it.idempotency_key for it in items],
            [it.id for it in items],
            [it.idempotency_ttl_ms for it in items],
            [it.id for it in items if it.on_duplicate == OnDuplicate.ALLOW_REUSE],
        )
        holders = {(r[0], r[1]): r[2].hex for r in rows}
        return [holders[(it.activity_type, it.idempotency_key or "")] for it in items]

    async def _take_over(self, conn: _Conn, queue: str, contested: Sequence[tuple[NewActivity, str]]) -> set[str]:
        """``idempotency_take_over`` for (item, holder) pairs: the ids (hex) that took their key."""
        rows = await conn.fetch(
            Q["idempotency_take_over"],
            queue,
            [it.activity_type for it, _ in contested],
            [it.idempotency_key for it, _ in contested],
            [holder for _, holder in contested],
            [it.id for it, _ in contested],
            [it.idempotency_ttl_ms for it, _ in contested],
            [it.on_duplicate == OnDuplicate.ALLOW_REUSE_ON_FAILURE for it, _ in contested],
        )
        return {r[0].hex for r in rows}

    async def claim(
        self,
        queue: str,
        worker_id: str,
        limit: int,
        activity_types: Sequence[str] | None,
        lease_ms: int,
    ) -> list[ClaimedActivity]:
        ev = self._work.get(queue)
        if ev is None:
            ev = self._work_event(queue)
        ev.clear(activity_types)  # a notification during the query sets it again
        if limit <= 0:
            return []
        token = uuid.uuid4().hex
        rows = await self._pool.fetch(
            Q["claim"],
            queue,
            None if activity_types is None else list(activity_types),
            limit,
            token,
            worker_id,
            lease_ms,
            self._async_claims,
        )
        return claimed_from_rows(rows, token)

    async def claim_suspect(
        self, queue: str, worker_id: str, activity_types: Sequence[str] | None, lease_ms: int
    ) -> list[ClaimedActivity]:
        token = uuid.uuid4().hex
        types = None if activity_types is None else list(activity_types)
        rows = await self._pool.fetch(
            Q["claim_suspect"], queue, types, 1, token, worker_id, lease_ms, self._async_claims
        )
        return claimed_from_rows(rows, token)

    async def suspects_ready(self, queue: str, activity_types: Sequence[str] | None) -> int:
        types = None if activity_types is None else list(activity_types)
        return int(await self._pool.fetchval(Q["suspects_ready"], queue, types) or 0)

    async def ack(self, queue: str, acks: Sequence[Ack]) -> list[str]:
        if not acks:
            return []
        valid = list(acks)
        try:
            row = await self._ack(queue, valid)
        except asyncpg.DataError:
            valid = [a for a in acks if _uuid_or_none(a.id) is not None]
            if len(valid) == len(acks):
                raise
            row = await self._ack(queue, valid) if valid else None
        accepted = {_hex(x) for x in row[0]} if row is not None else set()
        rejected: list[str] = []
        for a in acks:
            key = _uuid_or_none(a.id) if a.id not in accepted else a.id
            if key is not None and key in accepted:
                accepted.discard(key)  # a repeated id is accepted once, as in memory
            else:
                rejected.append(a.id)
        if rejected:
            log.info("rejected %d stale acks on queue %r (claim no longer held)", len(rejected), queue)
        return rejected

    async def _ack(self, queue: str, acks: Sequence[Ack]) -> asyncpg.Record | None:
        ids, tokens, outcomes, results, errors, retry_at = ack_params(acks)
        if all(o == _COMPLETED for o in outcomes) and all(e is None for e in errors):
            # the usual flush: three arrays to encode and no per-row CASEs (queries.sql, ack_completed)
            return await self._pool.fetchrow(Q["ack_completed"], queue, ids, tokens, results)
        tracebacks = [a.traceback for a in acks]  # failed attempts only reach this statement
        return await self._pool.fetchrow(Q["ack"], queue, ids, tokens, outcomes, results, errors, retry_at,
                                         tracebacks)

    async def _lease_statement(self, query: str, leases: Sequence[LeaseRef], *extra: Any) -> list[asyncpg.Record]:
        refs = list(leases)
        try:
            return await self._pool.fetch(query, *lease_params(refs), *extra)
        except asyncpg.DataError:
            refs = [r for r in refs if _uuid_or_none(r.id) is not None]
            if len(refs) == len(leases):
                raise
            if not refs:
                return []
            return await self._pool.fetch(query, *lease_params(refs), *extra)

    async def extend_leases(self, queue: str, leases: Sequence[LeaseRef], lease_ms: int) -> LeaseReport:
        if not leases:
            return LeaseReport([], [])
        rows = await self._lease_statement(Q["extend_leases"], leases, lease_ms)
        kept = {_hex(r[0]): bool(r[1]) for r in rows}
        lost: list[str] = []
        stop: list[str] = []
        for ref in leases:
            key = ref.id if ref.id in kept else _uuid_or_none(ref.id)
            if key is None or key not in kept:
                lost.append(ref.id)
            elif kept[key]:
                stop.append(ref.id)
        return LeaseReport(lost, stop)

    async def set_progress(self, queue: str, updates: Sequence[ProgressUpdate]) -> list[str]:
        if not updates:
            return []
        held = [u for u in updates if _uuid_or_none(u.id) is not None]  # a malformed id holds no claim
        rows = await self._pool.fetch(
            Q["set_progress"], [u.id for u in held], [u.claim_token for u in held], [u.progress for u in held]
        ) if held else []
        written = {_hex(r[0]) for r in rows}
        return [u.id for u in updates if _uuid_or_none(u.id) not in written]

    async def release(self, queue: str, leases: Sequence[LeaseRef]) -> list[str]:
        if not leases:
            return []
        rows = await self._lease_statement(Q["release"], leases)
        done = {_hex(x) for x in rows[0][0]} if rows else set()
        out: list[str] = []
        for ref in leases:
            key = _uuid_or_none(ref.id)
            if key is not None and key in done:
                done.discard(key)
                out.append(ref.id)
        return out

    async def requeue_expired(self, queue: str, limit: int) -> ReapReport:
        if limit <= 0:
            return ReapReport([], [])
        rows = await self._pool.fetch(Q["requeue_expired"], queue, limit, LEASE_EXPIRED_UNCHARGED)
        requeued = [_hex(r[0]) for r in rows if r[1] == "pending"]
        dead = [_hex(r[0]) for r in rows if r[1] == "dead_letter"]
        cancelled = [_hex(r[0]) for r in rows if r[1] == "cancelled"]
        if rows:
            log.info("reaped queue %r: %d requeued, %d dead-lettered, %d cancelled", queue, len(requeued), len(dead),
                     len(cancelled))
        return ReapReport(requeued, dead, cancelled)

    async def wait_for_work(
        self, queue: str, timeout: float, activity_types: Sequence[str] | None = None
    ) -> None:
        """Wait for a ``runnerq_work`` notification, at most until the next scheduled or retrying activity is due.

        The due time is read once per wait (query ``next_due``, of the
        caller's types, one index probe per type: migration 0007); an enqueue of a delayed activity and a retry also
        notify, so a wait times itself again when an earlier one arrives. If
        the query fails the wait lasts ``timeout`` (the claim reports the
        outage).
        """
        ev = self._work_event(queue)
        if self._closed or ev.is_set(activity_types):
            return
        try:
            if activity_types is None:
                due = await self._pool.fetchval(Q["next_due_any"], queue)
            else:
                due = await self._pool.fetchval(Q["next_due"], queue, list(activity_types))
        except _CONNECT_ERRORS as exc:
            log.debug("reading the next due time of queue %r failed: %s", queue, exc)
            due = None
        if due is not None:
            if due <= 0:
                return
            timeout = min(timeout, due + 0.001)  # + 1 ms: the claim compares with the server's clock
        await ev.wait(activity_types, timeout)

    # --------------------------------------------------------------- results
    async def get_result(self, activity_id: str) -> ActivityResult | None:
        key = _uuid_or_none(activity_id)
        if key is None:
            return None
        row = await self._pool.fetchrow(Q["get_result"], key)
        return None if row is None else _result(row)

    async def wait_for_result(self, activity_id: str, timeout: float | None) -> ActivityResult | None:
        key = _uuid_or_none(activity_id) or activity_id
        fut: asyncio.Future[ActivityResult] = asyncio.get_running_loop().create_future()
        # Register before looking, so a notification between the two is not lost.
        self._waiters.setdefault(key, []).append(fut)
        try:
            res = await self.get_result(activity_id)
            if res is not None:
                return res
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return None
        finally:
            discard_waiter(self._waiters, key, fut)

    async def cancel(self, activity_id: str) -> bool:
        key = _uuid_or_none(activity_id)
        if key is None:
            return False
        row = await self._pool.fetchrow(Q["cancel"], key)
        return row is not None

    # ------------------------------------------------------------ inspection
    async def stats(self, queue: str) -> QueueStats:
        rows = await self._pool.fetch(Q["stats"], queue)
        if sum(r[2] for r in rows) > _FOLD_AT:
            try:
                await self.fold_counts()
            except Exception as exc:
                if faults.classify(exc) is not Fault.BUSY:
                    raise
                # cancelled (statement_timeout): the counts read are exact anyway; the pruner folds later
                log.info("folding count deltas was cancelled (%s: %s)", type(exc).__name__, exc)
        return QueueStats(**{r[0]: r[1] for r in rows if r[1]})

    async def fold_counts(self) -> int:
        """Fold the count deltas the triggers appended into the counters (migration 0003).

        The engine's pruner does it every pass and :meth:`stats` once it reads
        more than a few thousand deltas; counts are exact either way.

        Returns
        -------
        int
            Delta rows folded.
        """
        return int(await self._pool.fetchval(Q["fold_counts"]))

    async def maintain(self) -> None:
        """Fold the count deltas (:meth:`fold_counts`)."""
        await self.fold_counts()

    async def list_activities(
        self, queue: str, status: str | None, offset: int = 0, limit: int = 50
    ) -> list[ActivitySnapshot]:
        rows = await self._pool.fetch(Q["list_activities"], queue, status, offset, limit)
        return [_snapshot(r) for r in rows]

    async def get_activity(self, activity_id: str) -> ActivitySnapshot | None:
        key = _uuid_or_none(activity_id)
        if key is None:
            return None
        try:
            row = await self._pool.fetchrow(Q["get_activity"], key)
        except asyncpg.UndefinedColumnError:  # not migrated to 0010/0011 yet (opened without migrating)
            row = await self._pool.fetchrow(Q["get_activity_before_0011"], key)
        if row is None:
            return None
        snap = _snapshot(row)
        if len(row) < 20 or (row[18] is None and row[19] is None):
            return snap
        return msgspec.structs.replace(snap, traceback=row[18], progress=row[19])

    async def get_events(self, activity_id: str) -> list[ActivityEvent]:
        key = _uuid_or_none(activity_id)
        if key is None:
            return []
        try:
            rows = await self._pool.fetch(Q["get_events"], key)
        except asyncpg.UndefinedColumnError:  # not migrated to 0013 yet (opened without migrating): no tracebacks
            return [_event(r) for r in await self._pool.fetch(Q["get_events_before_0013"], key)]
        return [_event(r) if r[6] is None else _event_with_traceback(r) for r in rows]

    async def list_dead_letter(self, queue: str, offset: int = 0, limit: int = 50) -> list[DeadLetterRecord]:
        rows = await self._pool.fetch(Q["list_dead_letter"], queue, offset, limit)
        return [DeadLetterRecord(_snapshot(r), r[15], r[18] or 0) for r in rows]

    async def event_stream(self, queue: str, after_id: int | None = None) -> AsyncIterator[ActivityEvent]:
        wake = asyncio.Event()
        self._streams.setdefault(queue, set()).add(wake)
        try:
            pos: Any = None
            if after_id is not None and after_id <= 0:
                pos = ("0", 0, 0)  # before the first event: replay everything stored
            elif after_id is not None:
                pos = await self._pool.fetchrow(Q["stream_position_of"], after_id)
                if pos is None:
                    log.warning("event %s is unknown (pruned?); the stream starts from now", after_id)
            if pos is None:
                pos = await self._pool.fetchrow(Q["stream_position_now"])
            assert pos is not None  # stream_position_now always returns one row
            tx, batch, ordinal = pos[0], pos[1], pos[2]
            while not self._closed:
                wake.clear()
                rows = await self._pool.fetch(Q["events_after"], queue, tx, batch, ordinal, _STREAM_PAGE)
                for r in rows:
                    tx, batch, ordinal = r[6], r[7], r[8]
                    yield _event(r)
                if len(rows) == _STREAM_PAGE:
                    continue
                # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancel that
                # arrives as the wake is set, and the cancelled stream kept reading the store
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._stream_poll):
                        await wake.wait()
        finally:
            wakers = self._streams.get(queue)
            if wakers is not None:
                wakers.discard(wake)
                if not wakers:
                    del self._streams[queue]

    # ------------------------------------------------------ worker registry
    async def register_worker(self, info: WorkerInfo, ttl_ms: int) -> None:
        await self._pool.execute(
            Q["register_worker"], info.queue, info.worker_id, info.host, info.pid, list(info.activity_types),
            info.in_flight, info.concurrency, info.started_at_ms, info.last_seen_ms, check_worker_ttl(ttl_ms),
        )

    async def deregister_worker(self, queue: str, worker_id: str) -> None:
        await self._pool.execute(Q["deregister_worker"], queue, worker_id)

    async def list_workers(self, queue: str | None = None) -> list[WorkerInfo]:
        return [
            WorkerInfo(
                worker_id=r[0], queue=r[1], host=r[2], pid=r[3], activity_types=tuple(r[4]), in_flight=r[5],
                concurrency=r[6], started_at_ms=r[7], last_seen_ms=r[8],
            )
            for r in await self._pool.fetch(Q["list_workers"], queue)
        ]

    async def set_type_defaults(self, queue: str, defaults: Sequence[TypeDefaults]) -> None:
        if defaults:
            last = {d.activity_type: d for d in defaults}  # a type named twice: the last one
            await self._pool.execute(
                Q["set_type_defaults"], queue, list(last), [d.max_retries for d in last.values()],
                [d.timeout_ms for d in last.values()], [d.priority for d in last.values()],
            )

    async def get_type_defaults(self, queue: str) -> dict[str, TypeDefaults]:
        rows = await self._pool.fetch(Q["get_type_defaults"], queue)
        return {r[0]: TypeDefaults(activity_type=r[0], max_retries=r[1], timeout_ms=r[2], priority=r[3]) for r in rows}

    async def ready_work(self, queue: str) -> ReadyWork:
        rows = await self._pool.fetch(Q["ready_by_type"], queue)
        return ReadyWork({r[0]: r[1] for r in rows}, min((r[2] for r in rows), default=None))

    # ------------------------------------------------- listings with filters
    async def list_queues(self) -> list[QueueSummary]:
        names = [r[0] for r in await self._pool.fetch(Q["queue_names"])]
        if not names:
            return []
        by_type: dict[str, dict[str, dict[str, int]]] = {n: {} for n in names}
        for name, typ, status, n in await self._pool.fetch(Q["counts_by_type"], names):
            by_type[name].setdefault(typ, {})[status] = n
        oldest = {r[0]: r[1] for r in await self._pool.fetch(Q["oldest_ready"], names)}
        out: list[QueueSummary] = []
        for name in names:
            counts: dict[str, int] = {}
            for per_status in by_type[name].values():
                for status, n in per_status.items():
                    counts[status] = counts.get(status, 0) + n
            out.append(QueueSummary(name, QueueStats(**counts), by_type[name], oldest.get(name)))
        return out

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
        checked = filters.row_filters(flt)
        scan = filters.ROW_SCAN_LIMIT if checked else limit + 1
        source = _source(flt, flt.statuses)
        if source is None:
            return ActivityPage([], None)
        kind, extra = source
        order = "desc" if newest_first else "asc"
        rows = await self._pool.fetch(
            Q[f"query_{kind}_{order}"], *_scan_args(queue, flt, flt.statuses, scan, limit + 1, at), *extra
        )
        items = [r for r in rows if r[3] is not None]
        nxt: str | None = None
        if len(items) > limit:
            items = items[:limit]
            nxt = filters.encode_cursor(items[-1][21], _hex(items[-1][3]), newest_first)
        elif checked and rows and rows[0][0] >= scan:
            nxt = filters.encode_cursor(rows[0][1], _hex(rows[0][2]), newest_first)
        return ActivityPage([_snapshot(r[3:21]) for r in items], nxt)

    async def count_activities(
        self, queue: str, flt: ActivityFilter, *, cap: int = filters.COUNT_CAP
    ) -> ActivityCount:
        flt = filters.check_filter(flt)
        cap = filters.check_cap(cap)
        return await self._count(self._pool, queue, flt, cap)

    async def _count(self, conn: asyncpg.Pool | _Conn, queue: str, flt: ActivityFilter, cap: int) -> ActivityCount:
        source = _source(flt, flt.statuses)
        if source is None:
            return ActivityCount(0, True)
        kind, extra = source
        checked = filters.row_filters(flt)
        scan = cap + filters.ROW_SCAN_LIMIT + 1 if checked else cap + 1
        statement = f"count_{kind}" if checked or kind not in ("status", "type") else f"count_plain_{kind}"
        row = await conn.fetchrow(Q[statement], *_scan_args(queue, flt, flt.statuses, scan, cap + 1, None), *extra)
        assert row is not None
        examined, matched = int(row[0]), int(row[1])
        if checked and examined >= scan:
            return ActivityCount(min(matched, cap), False)
        return ActivityCount(min(matched, cap), matched <= cap)

    async def _act(self, action: str, queue: str, flt: ActivityFilter, limit: int, *extra: Any) -> ActionResult:
        flt = filters.check_filter(flt)
        limit = filters.check_action_limit(limit)
        act, skip = filters.applicable(action, flt)
        checked = filters.row_filters(flt)
        picked: list[str] = []
        changed: list[str] = []
        empty_batches: list[int] = []
        async with self._pool.acquire() as conn, conn.transaction():
            source = _source(flt, act) if act else None
            at: filters.Cursor | None = None
            while source is not None and len(picked) < limit:
                want = limit - len(picked)
                scan = max(want, filters.ROW_SCAN_LIMIT) if checked else want
                kind, src = source
                rows = await conn.fetch(Q[f"pick_{kind}"], *_scan_args(queue, flt, act, scan, want, at), *src)
                picked += [_hex(r[3]) for r in rows if r[3] is not None]
                if not rows or rows[0][0] < scan or rows[0][2] is None:
                    break
                at = filters.Cursor(rows[0][1], _hex(rows[0][2]), True)
            # counted before the change, which would move the changed rows into skipped statuses
            skipped = (await self._count(conn, queue, msgspec.structs.replace(flt, statuses=skip), limit)).count \
                if skip else 0
            if picked:
                row = await conn.fetchrow(Q[f"{action}_many"], queue, picked, *extra)
                assert row is not None
                done = {_hex(x) for x in row[0]}
                changed = [i for i in picked if i in done]
                if action == "delete":
                    empty_batches = list(row[1])
            if empty_batches:
                await conn.execute(Q["delete_empty_events"], empty_batches)
        if changed:
            ev = self._work.get(queue)
            if ev is not None and action in ("retry", "run_now", "set_priority"):
                ev.set()
            self._wake_streams(queue)
        return ActionResult(action, changed, skipped + len(picked) - len(changed))

    async def retry_activities(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        return await self._act("retry", queue, flt, limit)

    async def cancel_activities(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        return await self._act("cancel", queue, flt, limit)

    async def run_now(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        return await self._act("run_now", queue, flt, limit)

    async def set_priority(
        self, queue: str, flt: ActivityFilter, priority: int, *, limit: int = 10_000
    ) -> ActionResult:
        return await self._act("set_priority", queue, flt, limit, filters.check_priority(priority))

    async def delete_activities(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        return await self._act("delete", queue, flt, limit, False)  # False: a "deleted" event goes to the stream

    # ------------------------------------------------------------ retention
    async def prune(self, queue: str, statuses: Sequence[str], older_than_ms: int, *, limit: int = 1000) -> int:
        wanted = check_prune(statuses, older_than_ms, limit)
        if not wanted:
            return 0
        async with self._pool.acquire() as conn, conn.transaction():
            ids = [r[0] for r in await conn.fetch(Q["prune_pick"], queue, wanted, older_than_ms, limit)]
            if not ids:
                return 0
            row = await conn.fetchrow(Q["delete_many"], queue, ids, True)
            assert row is not None
            if row[1]:
                await conn.execute(Q["delete_empty_events"], list(row[1]))
        return len(row[0])

    async def prune_events(self, queue: str, older_than_ms: int, *, limit: int = 1000) -> int:
        check_prune_events(older_than_ms, limit)
        return int(await self._pool.fetchval(Q["prune_events"], queue, older_than_ms, limit))

    async def hold(self, queue: str, purpose: str, holder: str, ttl_ms: int) -> bool:
        check_hold(purpose, ttl_ms)
        return await self._pool.fetchrow(Q["hold"], queue, purpose, holder, ttl_ms) is not None


def _broadcast(column: list[Any]) -> list[Any]:
    """``column``, or a list of its first element alone when every element equals it.

    The enqueue statement gives the value of a one-element array to every row;
    each array element costs asyncpg an ``isinstance`` check against three ABCs
    and an encode, and the server an element to receive and unnest.
    ``list.count`` compares in C (identity first), so the test is cheap.
    """
    return column[:1] if len(column) > 1 and column.count(column[0]) == len(column) else column


def _enqueue_args(items: Sequence[NewActivity]) -> list[Any]:
    """The enqueue statement's ``$2``..``$10``: ids one per item, the other columns through :func:`_broadcast`.

    ``$10`` (idempotency keys) is ``None`` when no item has one (unnest pads it with NULLs).

    Raises
    ------
    UnicodeDecodeError
        If a payload or metadata is not valid UTF-8 (see ``enqueue_params``).
    """
    ids, types, payloads, priorities, retries, timeouts, run_at, metadata, keys = enqueue_params(items)
    columns: list[list[Any]] = [types, payloads, priorities, retries, timeouts, run_at, metadata]
    tail = None if keys.count(None) == len(keys) else _broadcast(keys)
    return [ids, *(_broadcast(c) for c in columns), tail]


def _parents(items: Sequence[NewActivity]) -> list[str | None] | None:
    """The enqueue statement's parent ids (``$12``): ``None`` when no item has one (unnest pads it)."""
    return [it.parent_id for it in items] if any(it.parent_id is not None for it in items) else None


def _source(flt: ActivityFilter, statuses: Sequence[str] | None) -> tuple[str, list[Any]] | None:
    """Which query family serves ``flt`` and its source parameters; ``None``: nothing can match."""
    if statuses is not None and not statuses:
        return None
    types = None if flt.activity_types is None else list(flt.activity_types)
    if flt.ids is not None:
        ids = [u for i in flt.ids if (u := _uuid_or_none(i)) is not None]
        return ("ids", [ids, types]) if ids else None
    if flt.parent_id is not None:
        parent = _uuid_or_none(flt.parent_id)
        return None if parent is None else ("parent", [parent, types])
    if types is not None:
        return "type", [types]
    return "status", []


def _scan_args(
    queue: str,
    flt: ActivityFilter,
    statuses: Sequence[str] | None,
    scan: int,
    take: int,
    at: filters.Cursor | None,
) -> list[Any]:
    """Parameters $1-$10 of the query_*, count_* and pick_* statements."""
    cursor_id: str | None = None
    if at is not None:
        cursor_id = _uuid_or_none(at.id)
        if cursor_id is None:
            raise InvalidActivityError(f"invalid cursor (id {at.id!r})")
    return [
        queue,
        list(filters.ALL_STATUSES if statuses is None else statuses),
        scan,
        take,
        flt.created_after_ms,
        flt.created_before_ms,
        None if at is None else at.created,
        cursor_id,
        None if flt.priorities is None else list(flt.priorities),
        msgspec.json.encode(dict(flt.metadata)).decode() if flt.metadata else None,
    ]
