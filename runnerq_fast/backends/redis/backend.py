"""Redis backend on redis-py's asyncio client (hiredis parser).

Every state change is one Lua script run with ``EVALSHA`` (one round trip per
batch); the scripts live in ``lua/*.lua`` and are loaded once per client,
reloaded when the server answers ``NOSCRIPT`` (e.g. after a restart). Every
key of a queue is under one hash tag (see :mod:`.keys`), so a queue works on
Redis Cluster.

Wakeups: fetchers block in ``BLPOP`` on the wake lists of the types they claim
(one list per type, and one for fetchers of every type), so a token goes only
to a fetcher that can claim the work; the wait is timed on the client to the
next scheduled activity's due time (the server's ``BLPOP`` timeout is only as
precise as its ``hz``). Result waiters are woken by one
``PSUBSCRIBE`` connection per backend; live events are read from the queue's
stream with ``XREAD BLOCK``. Connection loss is retried with backoff by the
client and by each background loop, which logs it and carries on.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import hiredis
import msgspec
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from runnerq_fast.backends import rowcheck
from runnerq_fast.backends._servercheck import first_check
from runnerq_fast.backends._waiters import discard_waiter
from runnerq_fast.backends.redis import faults, keys
from runnerq_fast.backends.redis.enqargs import enqueue_args
from runnerq_fast.backends.redis.guard import guarded as _guarded
from runnerq_fast.backends.redis.operations import (
    SNAPSHOT_FIELDS,
    RedisOperations,
    member,
    numbers,
    parse_member,
    snapshot,
)
from runnerq_fast.backends.redis.registry import RedisRegistry
from runnerq_fast.backends.redis.retention import RedisRetention
from runnerq_fast.backends.rowcheck import as_int, as_text
from runnerq_fast.errors import BackendError, ConfigError
from runnerq_fast.models import (
    LEASE_EXPIRED_UNCHARGED,
    TERMINAL_STATUSES,
    Ack,
    AckOutcome,
    ActivityEvent,
    ActivityResult,
    ActivitySnapshot,
    ClaimedActivity,
    DeadLetterRecord,
    EnqueueResult,
    LeaseRef,
    LeaseReport,
    NewActivity,
    ProgressUpdate,
    QueueStats,
    ReapReport,
)
from runnerq_fast.resilience import Fault
from runnerq_fast.storage import Backend, refuse_connection
from runnerq_fast.urls import password_hint, redact_text, redact_url

__all__ = ["DEFAULT_RESULT_TTL", "RedisBackend", "load_script"]

log = logging.getLogger(__name__)

DEFAULT_RESULT_TTL = 86_400.0
"""Seconds a finished activity (and its result and events) is kept; dead letters are kept until deleted.

The reaper of any running worker of the queue removes it once that time has passed
(:meth:`RedisBackend.requeue_expired`), with its index entries and counts."""

_SCRIPTS = (
    "enqueue",
    "claim",
    "ack",
    "extend",
    "progress",
    "release",
    "reaper",
    "cancel",
    "retry",
    "cancel_many",
    "run_now",
    "priority",
    "delete",
    "summary",
    "query",
    "prune",
    "hold",
    "workers",
    "ready",
    "upgrade",
)
_HELPERS = ("_score", "_common")
_ENQUEUE_CHUNK = 1000
_UPGRADE_BATCH = 1000
_GLOB_SPECIAL = re.compile(r"[*?\[\]\\]")
_EXPIRED_BATCH = 10_000
_EXPIRED_CALLS = 20
_STREAM_PAGE = 1000

_LOCATE_CACHE = 10_000
_RESULT_SAFETY_NET = 5.0
_CONN_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)


def load_script(name: str, helpers: Sequence[str] = _HELPERS) -> str:
    """The text of ``lua/<name>.lua`` with the helper files prepended.

    Parameters
    ----------
    name : str
        Script name without ``.lua``.
    helpers : sequence of str
        Helper scripts (``_score``, ``_common``) to prepend, in order.

    Raises
    ------
    FileNotFoundError
        If a file is missing from the package.
    """
    lua = resources.files("runnerq_fast.backends.redis") / "lua"
    parts = [(lua / f"{h}.lua").read_text("utf-8") for h in helpers]
    parts.append((lua / f"{name}.lua").read_text("utf-8"))
    return "\n".join(parts)


def _s(value: bytes | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return value.decode(errors="replace")  # text this library wrote is UTF-8; a damaged field shows as such


_ERROR_STATUSES = frozenset({"failed", "dead_letter"})


def _result(
    activity_id: str, status: str, data: bytes | None, error: bytes | None, tb: bytes | None = None
) -> ActivityResult:
    """The result of a finished activity from its hash fields ``res``, ``e`` and ``tb``.

    ``e`` holds the last error of any attempt (a retried attempt's, a
    requeued lease's) and ``tb`` the last traceback: like the SQL backends, a
    result carries them only when the activity failed or was dead-lettered,
    never for a completed or cancelled one.
    """
    if status not in _ERROR_STATUSES:
        return ActivityResult(activity_id, status, data, None)
    return ActivityResult(activity_id, status, data, _s(error), None if tb is None else _s(tb))




#: the hash fields of a claimed activity after its id, in the order _claim_corrupt takes them
_CLAIMED_FIELDS = ("t", "p", "m", "n")


def _claim_corrupt(row: Sequence[bytes | None]) -> str:
    """The reason a claimed activity does not decode; ``row`` = the values of ``_CLAIMED_FIELDS``."""
    names = ("created_at_ms", "ready_at_ms", "priority", "retry_count", "max_retries", "timeout_ms")
    typ, payload, metadata, n = (b"" if v is None else v for v in row)  # a missing field reads as '' (as claim.lua)
    metadata = metadata if row[2] is not None else b"{}"  # but no field m is no metadata
    fields: dict[str, object] = {f: as_int(v) for f, v in zip(names, numbers(n), strict=True)}
    fields["activity_type"] = as_text(typ)
    fields["payload"], fields["metadata"] = payload, metadata
    return rowcheck.reason(fields) or f"{rowcheck.PREFIX}a claimed field does not decode"


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a background BLPOP's failure as seen (its waiter, if any, logs it)."""
    if not task.cancelled():
        task.exception()


def check_open_options(namespace: str, result_ttl: float, pool_timeout: float) -> None:
    """Validate the options every Redis ``open`` takes (one server or a cluster).

    Raises
    ------
    ConfigError
        If ``namespace`` is not a plain word or ``result_ttl`` / ``pool_timeout`` (seconds) is not positive.
    """
    if not namespace or any(c in namespace for c in "{}:*?[]\x00 "):
        raise ConfigError(f"namespace must be a non-empty word without braces, colons or globs: {namespace!r}")
    if not result_ttl > 0:
        raise ConfigError(f"result_ttl must be a positive number of seconds, got {result_ttl!r}")
    if not pool_timeout > 0:
        raise ConfigError(f"pool_timeout must be a positive number of seconds, got {pool_timeout!r}")


async def _is_cluster_node(client: aioredis.Redis) -> bool:
    """Whether the server runs in cluster mode (``INFO cluster``); ``False`` where ``INFO`` is not allowed."""
    try:
        info = await client.info("cluster")
    except ResponseError:
        return False
    return str(info.get("cluster_enabled", 0)) == "1"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _snapshot(queue: str, activity_id: str, h: dict[bytes, bytes]) -> ActivitySnapshot:
    """The snapshot of an activity hash read whole (``corrupt`` set if it does not decode)."""
    return snapshot(queue, activity_id, [h.get(f.encode()) for f in SNAPSHOT_FIELDS])


def _events(queue: str, activity_id: str, h: dict[bytes, bytes]) -> list[ActivityEvent]:
    """The events kept in an activity hash (fields ``x:<event id>``), oldest first; corrupt ones are left out.

    A failed attempt's event has its traceback in field ``xt:<event id>`` (ack.lua).
    """
    out = []
    tracebacks: dict[bytes, bytes] | None = None
    for field, value in h.items():
        if field[:2] != b"x:":
            if field[:3] == b"xt:":
                if tracebacks is None:
                    tracebacks = {}
                tracebacks[field[3:]] = value
            continue
        parts = value.split(b"\x1f", 2)
        event_id, at = as_int(field[2:]), as_int(parts[1]) if len(parts) > 1 else None
        if type(event_id) is not int or type(at) is not int:
            log.warning("skipping corrupt event %r of activity %s: %r", field, activity_id, value[:80])
            continue
        detail = parts[2].decode(errors="replace") if len(parts) > 2 else None
        out.append(ActivityEvent(event_id, activity_id, queue, parts[0].decode(errors="replace"), at, detail))
    if tracebacks:
        out = [
            e if (tb := tracebacks.get(b"%d" % e.id)) is None
            else msgspec.structs.replace(e, traceback=tb.decode(errors="replace"))
            for e in out
        ]
    out.sort(key=lambda e: e.id)
    return out


def _entry_events(queue: str, entry_id: bytes, fields: dict[bytes, bytes]) -> list[ActivityEvent]:
    """The events of one stream entry (one script run), see ``lua/_common.lua``.

    An entry holds its events as records ``<kind>\\x1f<id>\\x1f<detail ref>\\x1e`` in field ``e``
    (details in fields ``d<ref>``); an entry written before that layout has fields ``<i>`` and
    ``d<i>`` per event instead.
    """
    last = int(entry_id.split(b"-", 1)[1])
    n = int(fields[b"n"])
    at = int(fields[b"at"])
    first = last - n + 1
    records = fields.get(b"e")
    out = []
    if records is not None:
        details: dict[bytes, str | None] = {b"": None}
        for i, record in enumerate(records.split(b"\x1e")[:n]):
            kind, activity_id, ref = record.split(b"\x1f")
            if ref in details:
                detail = details[ref]
            else:
                detail = details[ref] = fields[b"d" + ref].decode()
            out.append(ActivityEvent(first + i, activity_id.decode(), queue, kind.decode(), at, detail))
        return out
    for i in range(1, n + 1):
        kind, _, activity_id = fields[str(i).encode()].partition(b"\x1f")
        old_detail = fields.get(b"d%d" % i)
        out.append(
            ActivityEvent(
                first + i - 1,
                activity_id.decode(),
                queue,
                kind.decode(),
                at,
                None if old_detail is None else old_detail.decode(),
            )
        )
    return out


class _HiredisPackingConnection(aioredis.Connection):
    """A connection that packs commands with hiredis (C) instead of redis-py's Python packer.

    redis-py's asyncio connection packs every argument in Python; for a batch
    of 500 enqueues (5,500 arguments) that is about 3 ms, hiredis about 0.5 ms.
    """

    def pack_command(self, *args: Any) -> list[bytes]:
        if isinstance(args[0], str) and " " in args[0]:  # "SCRIPT LOAD", "CONFIG GET", ...
            args = (*args[0].split(), *args[1:])
        return [hiredis.pack_command(args)]

    def pack_commands(self, commands: Any) -> list[bytes]:
        return [b"".join(self.pack_command(*cmd)[0] for cmd in commands)]


class RedisBackend(RedisRetention, RedisOperations, RedisRegistry, Backend):
    """Backend storing activities in Redis (7.0 or later).

    Open it with :meth:`open` (or ``rq.connect("redis://host:port/db")``).

    Parameters
    ----------
    url : str
        ``redis://`` or ``rediss://`` URL, as redis-py understands it.
    client : redis.asyncio.Redis
        An opened client with ``decode_responses=False``.
    result_ttl : float
        Seconds a finished activity is kept (default 24 h); dead letters stay
        until pruned.
    namespace : str
        First part of every key (default ``rq``), see :mod:`.keys`.
    """

    name = "redis"

    def __init__(
        self,
        url: str,
        client: aioredis.Redis,
        result_ttl: float = DEFAULT_RESULT_TTL,
        namespace: str = keys.DEFAULT_NAMESPACE,
    ) -> None:
        self.url = url
        self._ns = namespace
        # Any: redis-py types replies as unions over decode_responses; this client always returns bytes
        self._r: Any = client
        self._ttl_ms = max(1, int(result_ttl * 1000))
        self._src = {n: load_script(n) for n in _SCRIPTS}
        self._sha = {n: hashlib.sha1(s.encode()).hexdigest() for n, s in self._src.items()}
        self._where: dict[str, str] = {}
        self._waiters: dict[str, list[asyncio.Future[ActivityResult]]] = {}
        self._listener: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        self._closed = False
        self._lookups: set[asyncio.Task[None]] = set()
        #: a BLPOP still blocked after its caller's wait ended, by (queue, wake lists): the next wait reuses it
        self._blocked: dict[tuple[str, tuple[str, ...]], asyncio.Task[Any]] = {}

    @classmethod
    async def open(
        cls,
        url: str,
        result_ttl: float = DEFAULT_RESULT_TTL,
        max_connections: int = 64,
        namespace: str = keys.DEFAULT_NAMESPACE,
        pool_timeout: float = 20.0,
    ) -> RedisBackend:
        """Connect and load the scripts (the eviction policy is checked by a worker: :meth:`check_server`).

        Parameters
        ----------
        url : str
            ``redis://[:password@]host[:port][/db]`` or ``rediss://...``.
        result_ttl : float
            Seconds a finished activity and its result are kept (default 86,400).
        max_connections : int
            Size of the connection pool (blocking calls each hold one). A
            call that finds every connection busy waits for one (a
            ``BlockingConnectionPool``) instead of failing. Default 64.
        namespace : str
            First part of every key (default ``rq``); no ``{``, ``}`` or ``:``.
        pool_timeout : float
            Seconds a call waits for a free connection before it fails with
            :class:`BackendError` (default 20 s).

        Raises
        ------
        ConfigError
            If the URL is not a Redis URL, ``result_ttl`` is not positive or
            ``namespace`` is not a plain word.
        BackendError
            If the server cannot be reached.
        """
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise ConfigError(f"malformed backend URL {redact_url(url)!r}: {exc}{password_hint(url)}") from None
        scheme = parts.scheme.lower()
        if scheme not in ("redis", "rediss", "unix"):
            raise ConfigError(f"not a Redis URL: {redact_url(url)!r}")
        db = parts.path.strip("/")
        if scheme != "unix" and db and not (db.isdigit() and db.isascii()):
            # redis-py ignores a path that is not a number and uses database 0
            raise ConfigError(f"invalid Redis URL {redact_url(url)!r}: the database must be a number, "
                              f"got {redact_text(repr(db), url)}{password_hint(url)}")
        check_open_options(namespace, result_ttl, pool_timeout)
        extra: dict[str, Any] = {"connection_class": _HiredisPackingConnection} if scheme == "redis" else {}
        try:
            # A burst of callers waits for a connection instead of failing with MaxConnectionsError.
            pool = aioredis.BlockingConnectionPool.from_url(
                url,
                **extra,
                decode_responses=False,
                max_connections=max_connections,
                timeout=pool_timeout,
                socket_connect_timeout=5,
                socket_keepalive=True,
                health_check_interval=30,
                # redis-py never retries by itself: it cannot tell an enqueue from a read. The backend's
                # calls retry what is safe to retry (runnerq_fast.resilience, classified by .faults).
                retry=Retry(NoBackoff(), 0),
            )
            client = aioredis.Redis.from_pool(pool)  # closing the client closes the pool
            client.set_retry(Retry(NoBackoff(), 0))
        except ValueError as exc:
            raise ConfigError(f"invalid Redis URL {redact_url(url)!r}: {redact_text(str(exc), url)}"
                              f"{password_hint(url)}") from exc
        backend = cls(url, client, result_ttl, namespace)
        try:
            await client.ping()
            if await _is_cluster_node(client):
                await client.aclose()
                host = parts.hostname or "host"
                where = f"[{host}]" if ":" in host else host
                raise ConfigError(
                    f"{redact_url(url)} is a Redis Cluster node: connect with "
                    f"redis+cluster://{where}:{parts.port or 6379} (see README, Redis Cluster)"
                )
            await backend._load_scripts()
        except (RedisError, OSError, BackendError) as exc:
            await client.aclose()
            raise BackendError(f"cannot use Redis at {redact_url(url)}: {redact_text(str(exc), url)}") from exc
        backend._listener = asyncio.create_task(backend._listen(), name="runnerq-redis-results")
        return backend

    @property
    def client(self) -> aioredis.Redis:
        """The redis-py client (for tests and tools)."""
        client: aioredis.Redis = self._r
        return client

    def _store_fault(self, exc: Exception) -> Fault | None:
        return faults.classify(exc)

    async def check_server(self) -> None:
        """Warn once per server and process (from a worker engine's start) if ``maxmemory-policy`` evicts.

        See :meth:`check_eviction_policy`; opening the backend checks nothing,
        so the CLI, the synchronous client and scripts stay quiet. A failure
        to read the setting is logged, not raised.
        """
        if not first_check(self.url):
            return
        try:
            await self.check_eviction_policy()
        except Exception as exc:
            log.info("could not read the Redis maxmemory-policy (%s: %s)", type(exc).__name__, exc)

    async def check_eviction_policy(self) -> str | None:
        """Warn unless the server's ``maxmemory-policy`` is ``noeviction``; return the policy.

        Any other policy may silently drop queued activities when memory runs
        out. Warns on every call: :meth:`check_server` (a worker's start)
        calls it once per server and process. Returns the policy, or ``None``
        if ``CONFIG GET`` is not allowed (managed services), which is logged too.

        Raises
        ------
        BackendError
            When the server cannot be reached.
        """
        try:
            reply = await _guarded(self._r.config_get("maxmemory-policy"))
        except ResponseError as exc:
            log.warning("cannot read Redis maxmemory-policy (%s); make sure it is 'noeviction'", exc)
            return None
        policy = _s(reply.get("maxmemory-policy") or reply.get(b"maxmemory-policy"))
        if policy != "noeviction":
            log.warning(
                "Redis maxmemory-policy is %r: keys (queued activities!) may be evicted under memory "
                "pressure; set it to 'noeviction'",
                policy,
            )
        return policy

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        tasks = [t for t in (self._listener, *self._lookups, *self._blocked.values()) if t is not None]
        for t in tasks:
            t.cancel()
        if tasks:
            # Every await on the client re-raises a swallowed cancel (_guarded); the
            # bound is a last resort so close() can never hang on a task.
            _, stuck = await asyncio.wait(tasks, timeout=5.0)
            if stuck:
                log.warning("%d Redis backend task(s) did not stop within 5 s of close()", len(stuck))
        await self._r.aclose()

    # ---------------------------------------------------------------- scripts
    async def migrate(self) -> None:
        """Upgrade the activity hashes of every queue written before the packed layout (``lua/upgrade.lua``).

        Until this version an activity hash kept its numbers and its claim in fields of their own;
        they are now the fields ``n`` and ``k`` (see ``lua/_common.lua``). Run it (``runnerq-fast
        migrate``) with every worker and producer of the namespace stopped, once, before starting
        this version on a store an earlier one wrote; it is idempotent. It walks the keys of each
        queue of the registry (``SCAN``), :data:`_UPGRADE_BATCH` hashes per script call.
        """
        queues = sorted(m.decode() for m in await _guarded(self._r.smembers(keys.queues(self._ns))))
        for queue in queues:
            start = keys.activity(self._ns, queue, "")
            pattern = _GLOB_SPECIAL.sub(r"\\\g<0>", start) + "*"
            ids: list[str] = []
            async for key in self._r.scan_iter(match=pattern, count=1000):
                ids.append(key[len(start.encode()) :].decode())
                if len(ids) >= _UPGRADE_BATCH:
                    await self._run("upgrade", queue, ids)
                    ids = []
            if ids:
                await self._run("upgrade", queue, ids)

    async def _load_scripts(self) -> None:
        async with self._r.pipeline(transaction=False) as pipe:
            for name in _SCRIPTS:
                pipe.script_load(self._src[name])
            shas = await _guarded(pipe.execute())
        for name, sha in zip(_SCRIPTS, shas, strict=True):
            if _s(sha) != self._sha[name]:  # pragma: no cover - a server bug
                raise BackendError(f"Redis returned SHA {sha!r} for script {name}, expected {self._sha[name]}")

    async def _run(self, name: str, queue: str, args: Sequence[Any]) -> Any:
        try:
            reply = await _guarded(self._r.evalsha(self._sha[name], 1, keys.prefix(self._ns, queue), *args))
        except NoScriptError:
            log.info("Redis lost the runnerq scripts (restart or SCRIPT FLUSH); reloading them")
            await self._load_scripts()
            reply = await _guarded(self._r.evalsha(self._sha[name], 1, keys.prefix(self._ns, queue), *args))
        return reply

    def _remember(self, activity_id: str, queue: str) -> None:
        if len(self._where) >= _LOCATE_CACHE:
            self._where.clear()
        self._where[activity_id] = queue

    async def _locate(self, activity_id: str, *fields: str) -> tuple[str, list[Any]] | None:
        """Find the queue of ``activity_id``; returns it and HMGET of ``s`` + ``fields``."""
        q = self._where.get(activity_id)
        if q is not None:
            vals = await _guarded(self._r.hmget(keys.activity(self._ns, q, activity_id), ["s", *fields]))
            if vals[0] is not None:
                return q, vals
        members = await _guarded(self._r.smembers(keys.queues(self._ns)))
        queues = sorted(m.decode() for m in members)
        if not queues:
            return None
        async with self._r.pipeline(transaction=False) as pipe:
            for name in queues:
                pipe.hmget(keys.activity(self._ns, name, activity_id), ["s", *fields])
            replies = await _guarded(pipe.execute())
        for name, vals in zip(queues, replies, strict=True):
            if vals[0] is not None:
                self._remember(activity_id, name)
                return name, vals
        return None

    # ---------------------------------------------------------------- queueing
    async def enqueue(
        self, queue: str, items: Sequence[NewActivity], *, connection: object | None = None
    ) -> list[EnqueueResult]:
        """Store ``items`` with ``lua/enqueue.lua``, ``_ENQUEUE_CHUNK`` (1,000) per script call, one round trip.

        The arguments of a call are built by :func:`.enqargs.enqueue_args` (the options shared by
        several items are sent once); the script answers only for the items it did not create.
        """
        refuse_connection(self, connection)
        if not items:
            return []
        chunks = [enqueue_args(items[s : s + _ENQUEUE_CHUNK]) for s in range(0, len(items), _ENQUEUE_CHUNK)]
        replies = await self._enqueue_chunks(queue, chunks)
        out = [EnqueueResult(it.id, 1) for it in items]
        for start, flat in zip(range(0, len(items), _ENQUEUE_CHUNK), replies, strict=True):
            for j in range(0, len(flat), 3):  # (position in the chunk, outcome, holder id) of each item not created
                out[start + int(flat[j]) - 1] = EnqueueResult(flat[j + 2].decode(), int(flat[j + 1]))
        return out

    async def _enqueue_chunks(self, queue: str, chunks: list[list[Any]]) -> list[Any]:
        # The queue registry is written with every enqueue (not once per process): a server
        # restarted without persistence forgets it, and lookups by id need it.
        prefix = keys.prefix(self._ns, queue)
        for attempt in (1, 2):
            try:
                async with self._r.pipeline(transaction=False) as pipe:
                    pipe.sadd(keys.queues(self._ns), queue)
                    for args in chunks:
                        pipe.evalsha(self._sha["enqueue"], 1, prefix, *args)
                    replies = await _guarded(pipe.execute())
                return list(replies[1:])
            except NoScriptError:
                if attempt == 2:
                    raise
                log.info("Redis lost the runnerq scripts (restart or SCRIPT FLUSH); reloading them")
                await self._load_scripts()
        raise AssertionError("unreachable")  # pragma: no cover

    async def claim(
        self,
        queue: str,
        worker_id: str,
        limit: int,
        activity_types: Sequence[str] | None,
        lease_ms: int,
    ) -> list[ClaimedActivity]:
        if limit <= 0 or (activity_types is not None and not activity_types):
            return []
        return await self._claim(queue, worker_id, limit, activity_types, lease_ms, "ready:")

    async def claim_suspect(
        self, queue: str, worker_id: str, activity_types: Sequence[str] | None, lease_ms: int
    ) -> list[ClaimedActivity]:
        if activity_types is not None and not activity_types:
            return []
        return await self._claim(queue, worker_id, 1, activity_types, lease_ms, "susp:")

    async def suspects_ready(self, queue: str, activity_types: Sequence[str] | None) -> int:
        types = list(activity_types) if activity_types is not None else [
            t.decode() for t in await _guarded(self._r.smembers(keys.types(self._ns, queue)))
        ]
        if not types:
            return 0
        async with self._r.pipeline(transaction=False) as pipe:
            for t in types:
                pipe.zcard(keys.suspects(self._ns, queue, t))
            counts = await _guarded(pipe.execute())
        return sum(int(c) for c in counts)

    async def _claim(
        self, queue: str, worker_id: str, limit: int, activity_types: Sequence[str] | None, lease_ms: int, sets: str
    ) -> list[ClaimedActivity]:
        """Run claim.lua over the ready sets named ``sets`` ("ready:", or "susp:" for the suspects)."""
        token = uuid.uuid4().hex
        args: list[Any] = [int(limit), int(lease_ms), token, worker_id, sets]
        if activity_types is not None:
            args += activity_types
        flat = await self._run("claim", queue, args)
        out: list[ClaimedActivity] = []
        bad: list[str] = []
        for j in range(0, len(flat), 5):
            try:
                created, _, rest = flat[j + 4].partition(b":")
                ready, pr, rc, mr, to = rest.split(b"\x1f")
                out.append(
                    ClaimedActivity(
                        flat[j].decode(),
                        flat[j + 1].decode(),
                        flat[j + 2],
                        int(pr),
                        int(rc),
                        int(mr),
                        int(to),
                        flat[j + 3],
                        token,
                        int(created),
                        int(ready),
                    )
                )
            except (ValueError, UnicodeDecodeError):
                bad.append(flat[j].decode())
        if bad:  # dead-lettered alone: the others keep their claim and their attempt
            # rare (a damaged hash): its fields are read again (this claim holds them) to word the reason
            async with self._r.pipeline(transaction=False) as pipe:
                for i in bad:
                    pipe.hmget(keys.activity(self._ns, queue, i), list(_CLAIMED_FIELDS))
                rows = await _guarded(pipe.execute())
            corrupt = [Ack(i, token, AckOutcome.DEAD_LETTER, None, _claim_corrupt(v))
                       for i, v in zip(bad, rows, strict=True)]
            for a in corrupt:
                log.error("dead-lettering activity %s of queue %r: %s", a.id, queue, a.error)
            await self.ack(queue, corrupt)
        return out

    async def ack(self, queue: str, acks: Sequence[Ack]) -> list[str]:
        if not acks:
            return []
        # completed with no error: in runs of one claim token and one kind, "token, r, then id and
        # result r times", or for completions without a result "token, -r, then r ids" (lua/ack.lua)
        plain: list[Any] = []
        n_plain, token, at = 0, None, 0  # at: the position of the current run's length
        with_result: bool | None = None  # the current run's kind
        other: list[Any] = []
        completed = AckOutcome.COMPLETED
        for a in acks:
            if a.outcome == completed and a.error is None:
                result = a.result
                if a.claim_token != token or (result is not None) is not with_result:
                    token, with_result, at = a.claim_token, result is not None, len(plain) + 1
                    plain += (token, 0)
                if result is None:
                    plain[at] -= 1
                    plain.append(a.id)
                else:
                    plain[at] += 1
                    plain += (a.id, result)
                n_plain += 1
                continue
            flags = (1 if a.result is not None else 0) | (2 if a.error is not None else 0)
            error = a.error if a.error is not None else ""
            if a.traceback is not None:  # a failed attempt's: after the error and a NUL (no error text holds one)
                flags |= 4
                error = f"{error}\x00{a.traceback}"
            other += (
                a.id,
                a.claim_token,
                int(a.outcome),  # int(): redis-py would send an IntEnum's repr
                a.result if a.result is not None else b"",
                error,
                int(a.retry_at_ms),
                flags,
            )
        rejected = await self._run("ack", queue, [self._ttl_ms, n_plain, *plain, *other])
        return [r.decode() for r in rejected]

    async def extend_leases(self, queue: str, leases: Sequence[LeaseRef], lease_ms: int) -> LeaseReport:
        if not leases:
            return LeaseReport([], [])
        args: list[Any] = [int(lease_ms)]
        for ref in leases:
            args += (ref.id, ref.claim_token)
        lost, stop = await self._run("extend", queue, args)
        return LeaseReport([r.decode() for r in lost], [r.decode() for r in stop])

    async def set_progress(self, queue: str, updates: Sequence[ProgressUpdate]) -> list[str]:
        if not updates:
            return []
        args: list[Any] = []
        for u in updates:
            args += (u.id, u.claim_token, u.progress)
        return [r.decode() for r in await self._run("progress", queue, args)]

    async def release(self, queue: str, leases: Sequence[LeaseRef]) -> list[str]:
        if not leases:
            return []
        args: list[Any] = [self._ttl_ms]
        for ref in leases:
            args += (ref.id, ref.claim_token)
        return [r.decode() for r in await self._run("release", queue, args)]

    async def requeue_expired(self, queue: str, limit: int) -> ReapReport:
        """The reaper pass; also removes finished activities kept longer than ``result_ttl``.

        Those go (hash, index entries, counts) ``_EXPIRED_BATCH`` (10,000) per
        script call, at most ``_EXPIRED_CALLS`` (20) calls per pass, so one
        call blocks Redis for a bounded time and a pass every 5 s keeps up with
        ~40,000 finished activities per second.
        """
        requeued, dead, cancelled, dropped, repaired = await self._run(
            "reaper", queue, [max(0, limit), self._ttl_ms, _EXPIRED_BATCH, LEASE_EXPIRED_UNCHARGED, 1]
        )
        if repaired:
            log.warning(
                "redis queue %r: rebuilt its %s index(es): a key of the queue was lost (evicted? "
                "see check_eviction_policy)", queue, ", ".join(r.decode() for r in repaired)
            )
        await _guarded(self._r.sadd(keys.queues(self._ns), queue))  # the registry of queues, if it was lost
        for _ in range(_EXPIRED_CALLS - 1):
            if int(dropped) < _EXPIRED_BATCH:
                break
            args = [0, self._ttl_ms, _EXPIRED_BATCH, LEASE_EXPIRED_UNCHARGED]
            _, _, _, dropped, _ = await self._run("reaper", queue, args)
        return ReapReport([r.decode() for r in requeued], [d.decode() for d in dead], [c.decode() for c in cancelled])

    async def wait_for_work(
        self, queue: str, timeout: float, activity_types: Sequence[str] | None = None
    ) -> None:
        """Block in ``BLPOP`` on the wake lists of ``activity_types``, at most until the next scheduled activity is due.

        The lists are ``wake:<type>`` for each type (``wake`` when
        ``activity_types`` is ``None``). The due time is the head of the
        queue's ``sched`` set (any type: a claim promotes every due one), and
        the wait ends at it on the client's clock: the ``BLPOP`` is then left
        blocked and the next wait on the same lists takes it over, token and
        all. Connection errors are logged and end the wait early (a spurious
        return).
        """
        if self._closed:
            return
        ns = self._ns
        if activity_types is None:
            lists: tuple[str, ...] = (keys.wake(ns, queue),)
        else:
            lists = tuple(keys.wake_of_type(ns, queue, t) for t in activity_types)
        try:
            head = await _guarded(self._r.zrange(keys.sched(ns, queue), 0, 0, withscores=True))
            if head:
                due = (float(head[0][1]) + 1 - _now_ms()) / 1000.0  # + 1 ms: Redis's clock has ms steps
                if due <= 0:
                    return
                timeout = min(timeout, due)
            if not lists:
                await asyncio.sleep(timeout)  # no type has room (per-type limits): only the due time or the poll
                return
            slot = (queue, lists)
            task = self._blocked.get(slot)
            if task is None:
                task = asyncio.ensure_future(_guarded(self._r.blpop(list(lists), timeout=max(timeout, 0.001))))
                task.add_done_callback(_retrieve)
                self._blocked[slot] = task
            await asyncio.wait((task,), timeout=timeout)
            if task.done():
                if self._blocked.get(slot) is task:
                    del self._blocked[slot]
                task.result()
        except (RedisError, OSError) as exc:
            self._store_health.failed(exc)  # one warning per outage, not one per wait
            log.debug("waiting for work on Redis failed (%s: %s)", type(exc).__name__, exc)
            await asyncio.sleep(min(timeout, 0.5))

    # --------------------------------------------------------------- results
    async def get_result(self, activity_id: str) -> ActivityResult | None:
        found = await self._locate(activity_id, "res", "e", "tb")
        if found is None:
            return None
        status = found[1][0].decode()
        if status not in TERMINAL_STATUSES:
            return None
        return _result(activity_id, status, found[1][1], found[1][2], found[1][3])

    async def wait_for_result(self, activity_id: str, timeout: float | None) -> ActivityResult | None:
        """Wait for the ``done`` notification of ``activity_id`` (``timeout`` in seconds).

        Besides the pub/sub wakeup, the stored result is looked up every 5 s,
        a safety net for notifications lost while the subscriber reconnected.
        """
        fut: asyncio.Future[ActivityResult] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(activity_id, []).append(fut)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                first = 1.0 if timeout is None else min(1.0, timeout)  # never past the caller's timeout
                # not shielded: a shielded wait left pending at its timeout outlives a closed loop
                await asyncio.wait_for(self._subscribed.wait(), first)
            while True:
                res = await self.get_result(activity_id)
                if res is not None:
                    return res
                wait = _RESULT_SAFETY_NET
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    wait = min(wait, left)
                try:
                    return await asyncio.wait_for(asyncio.shield(fut), wait)
                except TimeoutError:
                    continue
        finally:
            discard_waiter(self._waiters, activity_id, fut)
            if not fut.done():
                fut.cancel()

    async def _listen(self) -> None:
        """Keep a PSUBSCRIBE on every queue's ``done`` channel, reconnecting forever."""
        delay = 0.05
        while not self._closed:
            pubsub = self._r.pubsub(ignore_subscribe_messages=True)
            try:
                await _guarded(pubsub.psubscribe(keys.done_pattern(self._ns)))
                if delay > 0.05:
                    log.warning("Redis result subscriber reconnected")
                    self._lookup(None, list(self._waiters))  # catch up on what was missed
                delay = 0.05
                self._subscribed.set()
                while not self._closed:
                    msg = await _guarded(pubsub.get_message(ignore_subscribe_messages=True, timeout=5.0))
                    if msg is None or msg.get("type") != "pmessage":
                        continue
                    wanted = [i for i in msg["data"].decode().split(",") if i in self._waiters]
                    if wanted:
                        self._lookup(keys.queue_of_channel(self._ns, msg["channel"].decode()), wanted)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._subscribed.clear()
                if faults.classify(exc) not in (None, Fault.ANSWERED):
                    self._store_health.failed(exc)  # one warning per outage
                (log.warning if delay == 0.05 else log.debug)(
                    "Redis result subscriber lost its connection (%s: %s); reconnecting in %.2f s",
                    type(exc).__name__,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    def _lookup(self, queue: str | None, ids: list[str]) -> None:
        if not ids:
            return
        task = asyncio.create_task(self._resolve(queue, ids))
        self._lookups.add(task)
        task.add_done_callback(self._lookups.discard)

    async def _resolve(self, queue: str | None, ids: list[str]) -> None:
        try:
            if queue is None:
                results = [await self.get_result(i) for i in ids]
            else:
                async with self._r.pipeline(transaction=False) as pipe:
                    for i in ids:
                        pipe.hmget(keys.activity(self._ns, queue, i), ["s", "res", "e", "tb"])
                    replies = await _guarded(pipe.execute())
                results = [
                    _result(i, v[0].decode(), v[1], v[2], v[3]) if v[0] is not None else None
                    for i, v in zip(ids, replies, strict=True)
                ]
        except (RedisError, OSError, BackendError) as exc:
            log.warning("result lookup failed (%s); waiters look again within 5 s", exc)
            return
        for i, res in zip(ids, results, strict=True):
            if res is None or res.status not in TERMINAL_STATUSES:
                continue
            for fut in self._waiters.get(i, ()):
                if not fut.done():
                    fut.set_result(res)

    async def cancel(self, activity_id: str) -> bool:
        found = await self._locate(activity_id)
        if found is None:
            return False
        return bool(await self._run("cancel", found[0], [activity_id, self._ttl_ms]))

    # ------------------------------------------------------------ inspection
    async def stats(self, queue: str) -> QueueStats:
        async with self._r.pipeline(transaction=False) as pipe:
            for status in keys.STATUSES:
                pipe.zcard(keys.count_key(self._ns, queue, status))
            counts = await _guarded(pipe.execute())
        return QueueStats(**dict(zip(keys.STATUSES, counts, strict=True)))

    async def _snapshots(self, queue: str, ids: Sequence[str]) -> list[ActivitySnapshot]:
        """Snapshots of ``ids`` in order; ids whose hash is gone are left out, corrupt ones have ``corrupt`` set."""
        if not ids:
            return []
        async with self._r.pipeline(transaction=False) as pipe:
            for i in ids:
                pipe.hmget(keys.activity(self._ns, queue, i), list(SNAPSHOT_FIELDS))
            rows = await _guarded(pipe.execute())
        return [snapshot(queue, i, v) for i, v in zip(ids, rows, strict=True) if v[0] is not None]

    async def list_activities(
        self, queue: str, status: str | None, offset: int = 0, limit: int = 50
    ) -> list[ActivitySnapshot]:
        """Activities of ``queue``, newest first (by creation time, then id).

        With ``status=None`` the status sets are merged. ``offset`` is skipped
        inside Redis (``ZRANGE ... LIMIT``); :meth:`query_activities` pages with
        a cursor instead.
        """
        if limit <= 0:
            return []
        wanted = keys.STATUSES if status is None else (status,)
        async with self._r.pipeline(transaction=False) as pipe:
            for s in wanted:
                if s == "processing":
                    pipe.zrange(keys.lease(self._ns, queue), 0, -1)
                else:
                    key = keys.status_set(self._ns, queue, s)
                    pipe.execute_command("ZRANGE", key, "+", "-", "BYLEX", "REV", "LIMIT", 0, offset + limit)
            replies = await _guarded(pipe.execute())
        members = [m for s, r in zip(wanted, replies, strict=True) if s != "processing" for m in r]
        if "processing" in wanted:
            held = replies[wanted.index("processing")]
            async with self._r.pipeline(transaction=False) as pipe:
                for i in held:
                    pipe.hget(keys.activity(self._ns, queue, i.decode()), "n")
                nums = await _guarded(pipe.execute())
            created = [numbers(n)[0] for n in nums]
            members += [member(int(c), i.decode()) for i, c in zip(held, created, strict=True) if c is not None]
        members = sorted(members, reverse=True)[offset : offset + limit]
        return await self._snapshots(queue, [parse_member(m)[1] for m in members])

    async def get_activity(self, activity_id: str) -> ActivitySnapshot | None:
        found = await self._locate(activity_id)
        if found is None:
            return None
        h = await _guarded(self._r.hgetall(keys.activity(self._ns, found[0], activity_id)))
        if not h:
            return None
        snap = _snapshot(found[0], activity_id, h)
        progress = h.get(b"pg")
        tb = h.get(b"tb")
        if progress is None and tb is None:
            return snap
        return msgspec.structs.replace(
            snap,
            traceback=None if tb is None else tb.decode(errors="replace"),
            progress=None if progress is None else progress.decode(errors="replace"),
        )

    async def get_events(self, activity_id: str) -> list[ActivityEvent]:
        found = await self._locate(activity_id)
        if found is None:
            return []
        h = await _guarded(self._r.hgetall(keys.activity(self._ns, found[0], activity_id)))
        return _events(found[0], activity_id, h)

    async def list_dead_letter(self, queue: str, offset: int = 0, limit: int = 50) -> list[DeadLetterRecord]:
        if limit <= 0:
            return []
        ids = await _guarded(self._r.zrevrange(keys.dead_letter(self._ns, queue), offset, offset + limit - 1))
        snaps = await self._snapshots(queue, [i.decode() for i in ids])
        async with self._r.pipeline(transaction=False) as pipe:
            for s in snaps:
                pipe.hget(keys.activity(self._ns, queue, s.id), "da")
            when = await _guarded(pipe.execute())
        return [
            DeadLetterRecord(s, s.last_error, w if type(w := as_int(da)) is int else 0)
            for s, da in zip(snaps, when, strict=True)
        ]

    async def event_stream(self, queue: str, after_id: int | None = None) -> AsyncIterator[ActivityEvent]:
        """Live events of ``queue`` read from its stream; ``after_id`` resumes after that event.

        Event ids count the queue's events (1, 2, ...); each script run adds one
        stream entry whose id is ``0-<its last event id>``. Connection errors
        are logged and the read resumes after the last event seen.
        """
        key = keys.stream(self._ns, queue)
        if after_id is not None:
            last = int(after_id)
        else:
            newest = await _guarded(self._r.xrevrange(key, "+", "-", count=1))
            last = int(newest[0][0].split(b"-", 1)[1]) if newest else 0
        delay = 0.05
        while not self._closed:
            try:
                reply = await _guarded(self._r.xread({key: f"0-{last}"}, count=_STREAM_PAGE, block=1000))
            except (RedisError, OSError) as exc:
                self._store_health.failed(exc)  # one warning per outage, not one per read
                log.debug("reading the Redis event stream failed (%s); retrying in %.2f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            delay = 0.05
            for _, entries in reply or ():
                for sid, fields in entries:
                    for ev in _entry_events(queue, sid, fields):
                        if ev.id > last:
                            last = ev.id
                            yield ev
