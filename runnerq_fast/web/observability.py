"""RunnerQ's read routes at RunnerQ's paths: ``/api/observability/...``.

``?queue=`` chooses the queue (default: the app's only queue, else
``default``). Listings take RunnerQ's ``?offset=&limit=``; the versioned
``/api/v1/`` routes (:mod:`runnerq_fast.web.v1`) page with keyset cursors
instead and are the ones to use on a large store.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from runnerq_fast.models import ActivitySnapshot, ActivityStatus
from runnerq_fast.web.context import WebContext
from runnerq_fast.web.responses import JsonResponse, ProblemError
from runnerq_fast.web.stream import EventStream, parse_resume_id
from runnerq_fast.web.wire import activity_view, dead_letter_view, event_view, result_view, runnerq_stats

__all__ = ["MAX_LIMIT", "MAX_OFFSET", "ObservabilityRoutes", "int_param", "normalize_id"]

MAX_LIMIT = 1000
"""Most items one listing returns."""

MAX_OFFSET = 10_000
"""Deepest ``?offset=`` of a RunnerQ listing (an offset is a scan; use the v1 cursors beyond)."""

_STATUSES = frozenset(s.value for s in ActivityStatus)
_HEX = frozenset("0123456789abcdef")


def int_param(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    """An integer query parameter within [lo, hi].

    Raises
    ------
    ProblemError
        422 when it is not an integer or out of range.
    """
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise ProblemError(422, f"{name} must be an integer, got {text!r}") from None
    if not lo <= value <= hi:
        raise ProblemError(422, f"{name} must be within [{lo}, {hi}], got {value}")
    return value


def normalize_id(text: str) -> str | None:
    """An activity id as stored (32 lowercase hex), accepting the dashed UUID form; ``None`` if it is not one."""
    t = text.strip().lower()
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
        Most events buffered per stream client.
    """

    def __init__(self, ctx: WebContext, *, sse_keepalive: float = 15.0, sse_buffer: int = 10_000) -> None:
        self.ctx = ctx
        self.sse_keepalive = sse_keepalive
        self.sse_buffer = sse_buffer
        #: The streams currently open (for tests and shutdown).
        self.streams: set[EventStream] = set()

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
            backend = await self.ctx.backend()
            if key == "dead_letter":
                records = await backend.list_dead_letter(queue, offset, limit)
                return JsonResponse([activity_view(r.activity) for r in records])
            snaps = await backend.list_activities(queue, key, offset, limit)
            return JsonResponse([activity_view(s) for s in snaps])
        if normalize_id(key) is None:
            raise ProblemError(
                400, f"{key!r} is neither a status ({', '.join(sorted(_STATUSES))}) nor an activity id"
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
        records = await (await self.ctx.backend()).list_dead_letter(queue, offset, limit)
        return JsonResponse([dead_letter_view(r) for r in records])

    async def stream(self, request: Request) -> Response:
        """``GET /api/observability/stream``: the queue's events as Server-Sent Events."""
        queue = self._queue(request)
        after = parse_resume_id(request)
        backend = await self.ctx.backend()
        stream = EventStream(
            backend.event_stream(queue, after),
            buffer_size=self.sse_buffer,
            keepalive=self.sse_keepalive,
            on_close=self.streams.discard,
            stop=self.ctx.shutting_down,
        )
        self.streams.add(stream)
        return stream.response()
