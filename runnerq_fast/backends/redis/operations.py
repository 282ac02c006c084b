"""Operator features of the Redis backend: filtered keyset listings, counts, queue summaries, actions.

The indexes these read are kept by the Lua scripts that change an
activity's status, in the same script call (see :mod:`.keys`):

* ``st:<status>``, ``ty:<type>``, ``kids:<parent>``: sorted sets whose
  members are ``"<created ms, 15 digits>:<id>"`` with score 0, so Redis keeps
  them in ``(created, id)`` order and a keyset cursor is a ``ZRANGE ... BYLEX``
  bound (no offset is ever skipped);
* ``counts``: a hash ``"<status>\\x1f<type>" -> n``.

A listing walks the smallest index that serves the filter (the status sets,
the type sets, one parent's children) inside ``lua/query.lua``, merging
several sets by member and checking the remaining conditions on the activity
hashes there; the given ids of a filter are read here. A page examines at
most :data:`runnerq_fast.filters.ROW_SCAN_LIMIT` rows (a count: ``cap`` +
that), then returns a short page with a cursor. A member whose hash is gone
(removed outside the scripts) or unreadable is skipped, the latter with a
warning.

Actions select their ids the same way (newest first) and apply them with one
Lua script per action and chunk of ids; each script re-checks every status
before it changes anything, so an activity that moved on meanwhile is skipped.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import msgspec

from runnerq_fast import filters
from runnerq_fast.backends import rowcheck
from runnerq_fast.backends.redis import keys
from runnerq_fast.backends.redis.guard import guarded
from runnerq_fast.backends.rowcheck import as_int, as_text
from runnerq_fast.codec import decode_json
from runnerq_fast.models import (
    ActionResult,
    ActivityCount,
    ActivityFilter,
    ActivityPage,
    ActivitySnapshot,
    QueueStats,
    QueueSummary,
)

__all__ = [
    "ACTION_CHUNK",
    "CHECK_FIELDS",
    "SNAPSHOT_FIELDS",
    "STEP_ROWS",
    "RedisOperations",
    "member",
    "numbers",
    "parse_member",
    "snapshot",
]

log = logging.getLogger("runnerq_fast.backends.redis")

CHECK_FIELDS = ("s", "t", "n", "m", "pa")
"""Hash fields a filter is checked on (status, type, the numbers with the priority, metadata, parent)."""

SNAPSHOT_FIELDS = (*CHECK_FIELDS, "p", "k", "fa", "e", "ik")
"""Hash fields of an :class:`~runnerq_fast.models.ActivitySnapshot` (the first ones are :data:`CHECK_FIELDS`)."""

ACTION_CHUNK = 1000
"""Ids per action script call: each call is atomic and keeps Redis busy for a bounded time."""

STEP_ROWS = 5000
"""Most rows one call of ``lua/query.lua`` examines (it blocks Redis for a few milliseconds)."""


def _listed(values: Sequence[Any] | None) -> list[Any]:
    """A list as ``lua/query.lua`` reads it: its length, then its values (``-1``: no condition)."""
    return [-1] if values is None else [len(values), *values]


def member(created_ms: int, activity_id: str) -> bytes:
    """The member of an activity in the ``st:``/``ty:``/``kids:`` indexes (``rq_member`` in Lua)."""
    return b"%015d:%s" % (created_ms, activity_id.encode())


def numbers(n: bytes | None) -> tuple[bytes | None, ...]:
    """The six numbers of the hash field ``n``: created, ready, priority, retry count, max retries, timeout.

    The field is ``b"<created ms, 15 digits>:<ready ms>\\x1f<priority>\\x1f<retry count>\\x1f<max
    retries>\\x1f<timeout ms>"`` (``rq_nums`` in ``lua/_common.lua``); the values are returned
    undecoded. A missing field, or one not of that shape, gives six ``None``.
    """
    if n is not None:
        created, sep, rest = n.partition(b":")
        parts = rest.split(b"\x1f")
        if sep and len(parts) == 5:
            return (created, *parts)
    return (None,) * 6


def claim_times(k: bytes | None) -> tuple[bytes | None, bytes | None]:
    """``(started ms, lease deadline ms)`` of the hash field ``k`` (``b"<token>\\x1f<started>\\x1f<lease>"``)."""
    if k is not None:
        parts = k.split(b"\x1f")
        if len(parts) == 3:
            return parts[1], parts[2]
    return None, None


def parse_member(m: bytes) -> tuple[int, str]:
    """``(created ms, id)`` of an index member."""
    return int(m[:15]), m[16:].decode()


def snapshot(queue: str, activity_id: str, v: Sequence[bytes | None]) -> ActivitySnapshot:
    """An :class:`ActivitySnapshot` from ``HMGET`` of :data:`SNAPSHOT_FIELDS`.

    A hash whose fields do not decode (a corrupt hash) gives a snapshot with
    ``corrupt`` set, see :mod:`runnerq_fast.backends.rowcheck`; this never raises.
    """
    (s, t, n, m, pa, p, k, fa, e, ik) = v
    c, r, pr, rc, mr, to = numbers(n)
    sa, lease = claim_times(k)
    status = as_text(s)
    return rowcheck.snapshot(
        {
            "id": activity_id,
            "queue": queue,
            "activity_type": as_text(t),
            "status": status,
            "priority": as_int(pr),
            "payload": p,
            "metadata": b"{}" if m is None else m,  # no field m: no metadata (lua/_common.lua)
            "retry_count": as_int(rc),
            "max_retries": as_int(mr),
            "timeout_ms": as_int(to),
            "created_at_ms": as_int(c),
            "ready_at_ms": as_int(r),
            "started_at_ms": as_int(sa),
            "finished_at_ms": as_int(fa),
            "lease_expires_at_ms": as_int(lease) if status == "processing" else None,
            "last_error": as_text(e),
            "idempotency_key": as_text(ik),
            "parent_id": as_text(pa),
        }
    )


def _matches(flt: ActivityFilter, created: int, v: Sequence[bytes | None]) -> bool:
    """Whether the row (``HMGET`` starting with :data:`CHECK_FIELDS`) matches every condition of ``flt``.

    A field that does not decode matches no condition on it; undecodable metadata raises
    ``msgspec.DecodeError`` (or ``UnicodeDecodeError``) when a condition needs it.
    """
    s, t, pr, m, pa = v[0], v[1], numbers(v[2])[2], v[3], v[4]
    if flt.statuses is not None and as_text(s) not in flt.statuses:
        return False
    if flt.activity_types is not None and as_text(t) not in flt.activity_types:
        return False
    if flt.parent_id is not None and as_text(pa) != flt.parent_id:
        return False
    if flt.priorities is not None and as_int(pr) not in flt.priorities:
        return False
    if flt.created_after_ms is not None and created < flt.created_after_ms:
        return False
    if flt.created_before_ms is not None and created >= flt.created_before_ms:
        return False
    if flt.metadata:
        meta = decode_json(m) if m not in (None, b"{}") else {}
        return filters.metadata_matches(meta, flt.metadata)
    return True


class _Found(msgspec.Struct):
    """One matching row met by :meth:`RedisOperations._rows`; ``values`` is ``None`` for a stop."""

    member: bytes
    values: list[bytes | None] | None


class RedisOperations:
    """The operator half of :class:`~runnerq_fast.backends.redis.RedisBackend` (a mixin).

    It uses the backend's client (``_r``), namespace (``_ns``), result TTL
    (``_ttl_ms``) and script runner (``_run``).
    """

    _r: Any
    _ns: str
    _ttl_ms: int

    async def _run(self, name: str, queue: str, args: Sequence[Any]) -> Any:  # pragma: no cover - the backend's
        raise NotImplementedError

    # ------------------------------------------------------------ walking
    def _bounds(self, flt: ActivityFilter, cursor: filters.Cursor | None, newest_first: bool) -> tuple[bytes, bytes]:
        """The ``(min, max)`` ``BYLEX`` bounds of the created range and the cursor."""
        lo = b"-" if flt.created_after_ms is None else b"[%015d" % flt.created_after_ms
        hi = b"+" if flt.created_before_ms is None else b"(%015d" % flt.created_before_ms
        if cursor is not None:
            at = member(cursor.created, cursor.id)
            if newest_first and (hi == b"+" or at < hi[1:]):
                hi = b"(" + at
            elif not newest_first and (lo == b"-" or at >= lo[1:]):
                lo = b"(" + at
        return lo, hi

    async def _plan(self, queue: str, flt: ActivityFilter) -> list[str]:
        """The index sets to walk for ``flt``: one parent's children, else the smaller of the status and type sets."""
        ns = self._ns
        if flt.parent_id is not None:
            return [keys.children(ns, queue, flt.parent_id)]
        by_status = None if flt.statuses is None else [keys.status_set(ns, queue, s) for s in flt.statuses]
        by_type = None if flt.activity_types is None else [keys.type_set(ns, queue, t) for t in flt.activity_types]
        if by_status is not None and by_type is not None:
            async with self._r.pipeline(transaction=False) as pipe:
                for st in flt.statuses or ():
                    pipe.zcard(keys.count_key(ns, queue, st))
                for k in by_type:
                    pipe.zcard(k)
                sizes = await guarded(pipe.execute())
            n_status = sum(sizes[: len(by_status)])
            return by_status if n_status <= sum(sizes[len(by_status) :]) else by_type
        if by_type is not None:
            return by_type
        if by_status is not None:
            return by_status
        return [keys.status_set(ns, queue, s) for s in keys.STATUSES]

    async def _fetch(self, queue: str, ids: Sequence[str], fields: Sequence[str]) -> list[list[bytes | None]]:
        async with self._r.pipeline(transaction=False) as pipe:
            for i in ids:
                pipe.hmget(keys.activity(self._ns, queue, i), list(fields))
            out: list[list[bytes | None]] = await guarded(pipe.execute())
        return out

    def _check(self, queue: str, flt: ActivityFilter, m: bytes, v: list[bytes | None]) -> bool | None:
        """Whether the row matches; ``None`` for a row that is gone or unreadable (logged)."""
        if v[0] is None:
            log.debug("activity %r of queue %r is gone; its index entry stays", m, queue)
            return None
        try:
            created, _ = parse_member(m)
            return _matches(flt, created, v)
        except (TypeError, ValueError, AttributeError, UnicodeDecodeError, msgspec.DecodeError) as exc:
            log.warning("skipping unreadable activity %r of queue %r (%s: %s)", m, queue, type(exc).__name__, exc)
            return None

    async def _rows(
        self,
        queue: str,
        flt: ActivityFilter,
        cursor: filters.Cursor | None,
        newest_first: bool,
        fields: Sequence[str],
        want: int,
        scan_limit: int | None,
    ) -> AsyncGenerator[_Found, None]:
        """The matching rows of ``queue`` in ``(created, id)`` order after ``cursor``.

        Yields at most ``want`` matches (with the values of ``fields`` when
        they are :data:`SNAPSHOT_FIELDS`, else none). Once ``scan_limit`` rows
        were examined, yields a :class:`_Found` without values (the member
        to resume after) and ends. The walk runs in ``lua/query.lua``, at most
        :data:`STEP_ROWS` rows per script call.
        """
        if flt.ids is not None:
            async for row in self._rows_by_id(queue, flt, cursor, newest_first, fields, want):
                yield row
            return
        index = await self._plan(queue, flt)
        lo, hi = self._bounds(flt, cursor, newest_first)
        fetch = tuple(fields) == SNAPSHOT_FIELDS
        head = [
            1 if newest_first else 0,
            lo,
            hi,
            0,
            0,
            1 if fetch else 0,
            *_listed([k[len(keys.prefix(self._ns, queue)) :] for k in index]),
            *_listed(flt.statuses),
            *_listed(flt.activity_types),
            *_listed(None if flt.priorities is None else [str(p) for p in flt.priorities]),
            *_listed([x for pair in flt.metadata for x in pair] if flt.metadata else None),
            flt.parent_id or "",
            *(fields if fetch else ()),
        ]
        found = examined = 0
        while True:
            budget = STEP_ROWS if scan_limit is None else min(STEP_ROWS, scan_limit - examined)
            head[1], head[2], head[3], head[4] = lo, hi, want - found, budget
            matches, rows, last, ended, n, bad = await self._run("query", queue, head)
            examined += int(n)
            for i in bad:
                log.warning("skipping unreadable activity %r of queue %r", i.decode(), queue)
            width = len(fields)
            for j, m in enumerate(matches):
                found += 1
                yield _Found(m, list(rows[j * width : (j + 1) * width]) if fetch else [])
            if found >= want or int(ended):
                return
            if scan_limit is not None and examined >= scan_limit:
                yield _Found(last, None)
                return
            if newest_first:
                hi = b"(" + last
            else:
                lo = b"(" + last

    async def _rows_by_id(
        self,
        queue: str,
        flt: ActivityFilter,
        cursor: filters.Cursor | None,
        newest_first: bool,
        fields: Sequence[str],
        want: int,
    ) -> AsyncGenerator[_Found, None]:
        """The given ids' matching rows, sorted (at most :data:`~runnerq_fast.filters.MAX_IDS`)."""
        ids = list(flt.ids or ())
        values = await self._fetch(queue, ids, (*fields, "n"))
        at = None if cursor is None else member(cursor.created, cursor.id)
        rows: list[tuple[bytes, list[bytes | None]]] = []
        for i, v in zip(ids, values, strict=True):
            if v[0] is None:
                continue
            try:
                m = member(int(numbers(v[-1])[0]), i)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                log.warning("skipping unreadable activity %r of queue %r (no creation time)", i, queue)
                continue
            if at is not None and (m >= at if newest_first else m <= at):
                continue
            if self._check(queue, flt, m, v):
                rows.append((m, v[:-1]))
        rows.sort(key=lambda r: r[0], reverse=newest_first)
        for m, v in rows[:want]:
            yield _Found(m, v)

    # ------------------------------------------------------------ listings
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
        items: list[ActivitySnapshot] = []
        last: bytes | None = None
        rows = self._rows(queue, flt, at, newest_first, SNAPSHOT_FIELDS, limit + 1, filters.ROW_SCAN_LIMIT)
        async with contextlib.aclosing(rows):
            async for found in rows:
                if found.values is None or len(items) == limit:
                    stop = found.member if found.values is None else last
                    assert stop is not None
                    created, aid = parse_member(stop)
                    return ActivityPage(items, filters.encode_cursor(created, aid, newest_first))
                _, aid = parse_member(found.member)
                items.append(snapshot(queue, aid, found.values))
                last = found.member
        return ActivityPage(items, None)

    async def count_activities(self, queue: str, flt: ActivityFilter, *, cap: int = filters.COUNT_CAP) -> ActivityCount:
        flt = filters.check_filter(flt)
        cap = filters.check_cap(cap)
        n = await self._indexed_count(queue, flt)
        if n is not None:
            return ActivityCount(min(n, cap), n <= cap)
        n = 0
        rows = self._rows(queue, flt, None, True, CHECK_FIELDS, cap + 1, cap + filters.ROW_SCAN_LIMIT)
        async with contextlib.aclosing(rows):
            async for found in rows:
                if found.values is None:
                    return ActivityCount(n, False)
                if n == cap:
                    return ActivityCount(n, False)
                n += 1
        return ActivityCount(n, True)

    async def _indexed_count(self, queue: str, flt: ActivityFilter) -> int | None:
        """The count read from the indexes alone (``ZCARD``, ``ZLEXCOUNT``, the counters), if they serve ``flt``."""
        if flt.ids is not None or filters.row_filters(flt):
            return None
        ns = self._ns
        ranged = flt.created_after_ms is not None or flt.created_before_ms is not None
        lo, hi = self._bounds(flt, None, True)
        if flt.parent_id is not None:
            if flt.statuses is not None or flt.activity_types is not None:
                return None
            index = [keys.children(ns, queue, flt.parent_id)]
        elif flt.statuses is not None and flt.activity_types is not None:
            if ranged:
                return None
            pairs = [f"{s}\x1f{t}" for s in flt.statuses for t in flt.activity_types]
            got = await guarded(self._r.hmget(keys.counts(ns, queue), pairs))
            return sum(int(g) for g in got if g is not None)
        elif flt.activity_types is not None:
            index = [keys.type_set(ns, queue, t) for t in flt.activity_types]
        else:
            statuses = flt.statuses or keys.STATUSES
            if ranged and "processing" in statuses:
                return None  # no lex index of the processing ids: walk
            index = [keys.count_key(ns, queue, s) for s in statuses]
        async with self._r.pipeline(transaction=False) as pipe:
            for k in index:
                if ranged:
                    pipe.zlexcount(k, lo, hi)
                else:
                    pipe.zcard(k)
            sizes = await guarded(pipe.execute())
        return int(sum(sizes))

    async def list_queues(self) -> list[QueueSummary]:
        names = sorted(m.decode() for m in await guarded(self._r.smembers(keys.queues(self._ns))))
        out: list[QueueSummary] = []
        for name in names:
            cards, flat, oldest = await self._run("summary", name, keys.STATUSES)
            counts = dict(zip(keys.STATUSES, (int(c) for c in cards), strict=True))
            if not any(counts.values()):
                continue
            by_type: dict[str, dict[str, int]] = {}
            for j in range(0, len(flat), 2):
                status, _, typ = flat[j].decode().partition("\x1f")
                n = int(flat[j + 1])
                if n > 0:
                    by_type.setdefault(typ, {})[status] = n
            out.append(QueueSummary(name, QueueStats(**counts), by_type, None if int(oldest) < 0 else int(oldest)))
        return out

    # ------------------------------------------------------------- actions
    async def _select(self, queue: str, flt: ActivityFilter, action: str, limit: int) -> tuple[list[str], int]:
        """Up to ``limit`` ids ``action`` applies to (newest first), and how many matched in other statuses."""
        flt = filters.check_filter(flt)
        limit = filters.check_action_limit(limit)
        act, skip = filters.applicable(action, flt)
        ids: list[str] = []
        if act:
            sub = msgspec.structs.replace(flt, statuses=act)
            rows = self._rows(queue, sub, None, True, CHECK_FIELDS, limit, None)
            async with contextlib.aclosing(rows):
                async for found in rows:
                    ids.append(parse_member(found.member)[1])
        skipped = 0
        if skip:
            skipped = (await self.count_activities(queue, msgspec.structs.replace(flt, statuses=skip), cap=limit)).count
        return ids, skipped

    async def _apply(self, script: str, queue: str, head: Sequence[Any], ids: list[str]) -> tuple[list[str], int]:
        changed: list[str] = []
        skipped = 0
        for start in range(0, len(ids), ACTION_CHUNK):
            done, n = await self._run(script, queue, [*head, *ids[start : start + ACTION_CHUNK]])
            changed += [d.decode() for d in done]
            skipped += int(n)
        return changed, skipped

    async def _action(
        self, action: str, script: str, queue: str, flt: ActivityFilter, limit: int, head: Sequence[Any] = ()
    ) -> ActionResult:
        ids, skipped = await self._select(queue, flt, action, limit)
        changed, late = await self._apply(script, queue, head, ids)
        return ActionResult(action, changed, skipped + late)

    async def retry_activities(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        return await self._action("retry", "retry", queue, flt, limit)

    async def cancel_activities(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        return await self._action("cancel", "cancel_many", queue, flt, limit, (self._ttl_ms,))

    async def run_now(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        return await self._action("run_now", "run_now", queue, flt, limit)

    async def set_priority(
        self, queue: str, flt: ActivityFilter, priority: int, *, limit: int = 10_000
    ) -> ActionResult:
        priority = filters.check_priority(priority)
        return await self._action("set_priority", "priority", queue, flt, limit, (priority,))

    async def delete_activities(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        return await self._action("delete", "delete", queue, flt, limit)
