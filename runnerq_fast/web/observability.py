"""RunnerQ's read routes at RunnerQ's paths: ``/api/observability/...``.

``?queue=`` chooses the queue (default: the app's only queue, else
``default``). Listings take RunnerQ's ``?offset=&limit=`` (offset at most
10,000), served from the store's keyset pages of the status, so a request
reads at most ``offset + limit`` rows; the versioned ``/api/v1/`` routes
(:mod:`runnerq_fast.web.v1`) page with cursors instead.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from runnerq_fast.filters import MAX_PAGE
from runnerq_fast.models import ActivityFilter, ActivitySnapshot, ActivityStatus
from runnerq_fast.web.context import WebContext
from runnerq_fast.web.responses import JsonResponse, ProblemError
from runnerq_fast.web.stream import EventStream, StreamHub, parse_resume_id
from runnerq_fast.web.wire import (
    INTEGER_TEXT,
    DeadLetterView,
    activity_view,
    event_view,
    ms_to_datetime,
    result_view,
    runnerq_stats,
)

__all__ = ["MAX_LIMIT", "MAX_OFFSET", "ObservabilityRoutes", "int_param", "normalize_id"]

MAX_LIMIT = 1000
"""Most items one listing returns."""

MAX_OFFSET = 10_000
"""Deepest ``?offset=`` of a RunnerQ listing (an offset is a scan; use the v1 cursors beyond)."""

_STATUSES = frozenset(s.value for s in ActivityStatus)
_HEX = frozenset("0123456789abcdef")


def int_param(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    """An integer query parameter within [lo, hi].

    An absent parameter is ``default``; one given must be ASCII digits with an optional minus sign
    (``?limit=`` with no value, ``+5``, ``5_0`` or ``\u0665`` are refused, as the OpenAPI document says).

    Raises
    ------
    ProblemError
        422 when it is not an integer or out of range.
    """
    text = request.query_params.get(name)
    if text is None:
        return default
    if INTEGER_TEXT.fullmatch(text) is None:
        raise ProblemError(422, f"{name} must be an integer, got {text!r}")
    value = int(text)
    if not lo <= value <= hi:
        raise ProblemError(422, f"{name} must be within [{lo}, {hi}], got {value}")
    return value


def normalize_id(text: str) -> str | None:
    """An activity id as stored (32 lowercase hex), accepting the dashed UUID form; ``None`` if it is not one
    (:data:`~runnerq_fast.web.wire.ID_PATTERN`)."""
    t = text.lower()
    if len(t) == 36 and t[8] == t[13] == t[18] == t[23] == "-":
        t = t.replace("-", "")
    if len(t) != 32 or not _HEX.issuperset(t):
        return None
    return t


class ObservabilityRoutes:
    """RunnerQ's routes for one app.

    Parameters
    ----------
    ctx : WebContext
        The app's state.
    sse_keepalive : float
        Seconds between keepalive comments on an idle stream.
    sse_buffer : int
        Most events a stream client may lag before it is told to resync: the
        size of each queue's shared ring of recent events.
    sse_flush_interval : float
        Shortest time between two sends to a stream client while events
        flow, seconds. Default 0.1.
    sse_grace : float
        Seconds a queue's shared reader runs on after its last client left. Default 2.
    """

    def __init__(self, ctx: WebContext, *, sse_keepalive: float = 15.0, sse_buffer: int = 10_000,
                 sse_flush_interval: float = 0.1, sse_grace: float = 2.0) -> None:
        self.ctx = ctx
        self.sse_keepalive = sse_keepalive
        self.sse_buffer = sse_buffer
        self.sse_flush_interval = sse_flush_interval
        self.sse_grace = sse_grace
        #: The streams currently open (for tests and shutdown).
        self.streams: set[EventStream] = set()
        #: The shared reader of each queue with streams open (or within its grace period).
        self.hubs: dict[str, StreamHub] = {}

    def _queue(self, request: Request) -> str:
        return self.ctx.queue(request.query_params.get("queue"))

    async def activity(self, activity_id: str) -> ActivitySnapshot:
        """The activity, if it exists in a queue this app serves.

        Raises
        ------
        ProblemError
            404 otherwise.
        """
        key = normalize_id(activity_id)
        snap = None
        if key is not None:
            snap = await (await self.ctx.backend()).get_activity(key)
        if snap is None or (self.ctx.queues is not None and snap.queue not in self.ctx.queues):
            raise ProblemError(404, f"no activity {activity_id!r}")
        return snap

    async def stats(self, request: Request) -> Response:
        """``GET /api/observability/stats``: counts by status."""
        queue = self._queue(request)
        st = await (await self.ctx.backend()).stats(queue)
        return JsonResponse(runnerq_stats(queue, st))

    async def activities(self, request: Request) -> Response:
        """``GET /api/observability/activities/{status_or_id}``: a listing by status, or one activity."""
        key: str = request.path_params["key"]
        if key in _STATUSES:
            queue = self._queue(request)
            offset = int_param(request, "offset", 0, 0, MAX_OFFSET)
            limit = int_param(request, "limit", 50, 1, MAX_LIMIT)
            snaps = await self._newest(queue, key, offset, limit)
            return JsonResponse([activity_view(s) for s in snaps])
        if normalize_id(key) is None:  # not a resource this route serves: 404, as for an unknown id
            raise ProblemError(
                404, f"{key!r} is neither a status ({', '.join(sorted(_STATUSES))}) nor an activity id"
            )
        return JsonResponse(activity_view(await self.activity(key)))

    async def events(self, request: Request) -> Response:
        """``GET /api/observability/activities/{id}/events``: the ``?limit=`` (50) latest events, oldest first."""
        snap = await self.activity(request.path_params["id"])
        limit = int_param(request, "limit", 50, 1, MAX_LIMIT)
        evs = await (await self.ctx.backend()).get_events(snap.id)
        return JsonResponse([event_view(e) for e in evs[-limit:]])

    async def result(self, request: Request) -> Response:
        """``GET /api/observability/activities/{id}/result``: the stored outcome, ``null`` while unfinished."""
        snap = await self.activity(request.path_params["id"])
        res = await (await self.ctx.backend()).get_result(snap.id)
        return JsonResponse(None if res is None else result_view(res))

    async def dead_letter(self, request: Request) -> Response:
        """``GET /api/observability/dead-letter``: dead-lettered activities, newest first."""
        queue = self._queue(request)
        offset = int_param(request, "offset", 0, 0, MAX_OFFSET)
        limit = int_param(request, "limit", 50, 1, MAX_LIMIT)
        snaps = await self._newest(queue, "dead_letter", offset, limit)
        return JsonResponse([
            DeadLetterView(activity_view(s), s.last_error, ms_to_datetime(s.finished_at_ms or s.ready_at_ms))
            for s in snaps
        ])

    async def _newest(self, queue: str, status: str, offset: int, limit: int) -> list[ActivitySnapshot]:
        """Activities of one status, newest first, ``offset`` skipped: keyset pages of the status index,
        so the work is bounded by ``offset + limit`` rows however many others the queue holds."""
        backend = await self.ctx.backend()
        flt = ActivityFilter(statuses=(status,))
        out: list[ActivitySnapshot] = []
        cursor: str | None = None
        want = offset + limit
        while len(out) < want:
            page = await backend.query_activities(queue, flt, limit=min(MAX_PAGE, want - len(out)), cursor=cursor)
            out += page.items
            cursor = page.next_cursor
            if cursor is None:
                break
        return out[offset:want]

    async def stream(self, request: Request) -> Response:
        """``GET /api/observability/stream``: the queue's events as Server-Sent Events."""
        queue = self._queue(request)
        after = parse_resume_id(request)
        stream = (await self._hub(queue)).client(after, on_close=self.streams.discard)
        self.streams.add(stream)
        return stream.response()

    async def _hub(self, queue: str) -> StreamHub:
        """The queue's shared reader, started by its first client."""
        hub = self.hubs.get(queue)
        if hub is None or hub.closed:
            backend = await self.ctx.backend()
            hub = self.hubs.get(queue)  # another request may have started one meanwhile
            if hub is None or hub.closed:

                def forget(h: StreamHub) -> None:
                    if self.hubs.get(queue) is h:
                        del self.hubs[queue]

                hub = self.hubs[queue] = StreamHub(
                    lambda after: backend.event_stream(queue, after),
                    history=self.sse_buffer,
                    flush_interval=self.sse_flush_interval,
                    keepalive=self.sse_keepalive,
                    grace=self.sse_grace,
                    stop=self.ctx.shutting_down,
                    on_close=forget,
                )
        return hub
