"""The versioned read routes under ``/api/v1/``: queues, filtered listings with keyset cursors, counts, one activity.

Listings page by ``(created_at, id)`` with the store's keyset cursors
(``?cursor=``, never an OFFSET); counts stop at a cap and say whether they
are exact. Neither reads all finished rows of a queue (the backends'
``query_activities`` / ``count_activities`` bound their work).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from runnerq_fast.errors import InvalidActivityError
from runnerq_fast.filters import COUNT_CAP, MAX_ACTION_LIMIT, MAX_PAGE
from runnerq_fast.models import ActivityFilter, ActivitySnapshot, QueueStats, QueueSummary
from runnerq_fast.web.context import WebContext
from runnerq_fast.web.filtering import filter_from_query
from runnerq_fast.web.observability import int_param, normalize_id
from runnerq_fast.web.responses import JsonResponse, ProblemError
from runnerq_fast.web.wire import (
    ActivityDetail,
    ActivityPageView,
    CountView,
    QueuesResponse,
    activity_view,
    event_view,
    queue_view,
    result_view,
)

__all__ = ["V1Routes"]


def _order(request: Request) -> bool:
    order = request.query_params.get("order", "newest")
    if order not in ("newest", "oldest"):
        raise ProblemError(422, f"order must be newest or oldest, got {order!r}")
    return order == "newest"


class V1Routes:
    """The ``/api/v1/`` read routes of one app."""

    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    async def _activity(self, queue: str, activity_id: str) -> ActivitySnapshot:
        key = normalize_id(activity_id)
        snap = None if key is None else await (await self.ctx.backend()).get_activity(key)
        if snap is None or snap.queue != queue:
            raise ProblemError(404, f"no activity {activity_id!r} in queue {queue!r}")
        return snap

    async def queues(self, request: Request) -> Response:
        """``GET /api/v1/queues``: every queue with counts by status and by activity type."""
        summaries = await (await self.ctx.backend()).list_queues()
        served = self.ctx.queues
        views = [queue_view(s) for s in summaries if served is None or s.queue in served]
        return JsonResponse(QueuesResponse(views))

    async def queue(self, request: Request) -> Response:
        """``GET /api/v1/queues/{queue}``: one queue's summary (zeros for a queue with no activity)."""
        queue = self.ctx.queue(request.path_params["queue"])
        for s in await (await self.ctx.backend()).list_queues():
            if s.queue == queue:
                return JsonResponse(queue_view(s))
        return JsonResponse(queue_view(QueueSummary(queue, QueueStats(), {}, None)))

    async def list_activities(self, request: Request) -> Response:
        """``GET /api/v1/queues/{queue}/activities``: a filtered page, newest first unless ``?order=oldest``."""
        queue = self.ctx.queue(request.path_params["queue"])
        flt = filter_from_query(request.query_params)
        return await self._page(request, queue, flt)

    async def _page(self, request: Request, queue: str, flt: ActivityFilter, newest: bool | None = None) -> Response:
        limit = int_param(request, "limit", 50, 1, MAX_PAGE)
        cursor = request.query_params.get("cursor") or None
        newest_first = _order(request) if newest is None else newest
        try:
            page = await (await self.ctx.backend()).query_activities(
                queue, flt, limit=limit, cursor=cursor, newest_first=newest_first
            )
        except InvalidActivityError as exc:
            raise ProblemError(422, str(exc)) from None
        return JsonResponse(ActivityPageView([activity_view(s) for s in page.items], page.next_cursor))

    async def count(self, request: Request) -> Response:
        """``GET /api/v1/queues/{queue}/activities/count``: how many match (``?cap=``, default 10,000)."""
        queue = self.ctx.queue(request.path_params["queue"])
        flt = filter_from_query(request.query_params)
        cap = int_param(request, "cap", COUNT_CAP, 1, MAX_ACTION_LIMIT)
        try:
            n = await (await self.ctx.backend()).count_activities(queue, flt, cap=cap)
        except InvalidActivityError as exc:
            raise ProblemError(422, str(exc)) from None
        return JsonResponse(CountView(n.count, n.exact))

    async def detail(self, request: Request) -> Response:
        """``GET /api/v1/queues/{queue}/activities/{id}``: the activity, its events, result and children."""
        queue = self.ctx.queue(request.path_params["queue"])
        snap = await self._activity(queue, request.path_params["id"])
        backend = await self.ctx.backend()
        events = await backend.get_events(snap.id)
        res = await backend.get_result(snap.id)
        children = await backend.query_activities(queue, ActivityFilter(parent_id=snap.id), limit=50,
                                                  newest_first=False)
        return JsonResponse(
            ActivityDetail(
                activity=activity_view(snap),
                events=[event_view(e) for e in events],
                result=None if res is None else result_view(res),
                children=[activity_view(c) for c in children.items],
                children_next_cursor=children.next_cursor,
            )
        )

    async def children(self, request: Request) -> Response:
        """``GET /api/v1/queues/{queue}/activities/{id}/children``: child activities, oldest first."""
        queue = self.ctx.queue(request.path_params["queue"])
        snap = await self._activity(queue, request.path_params["id"])
        return await self._page(request, queue, ActivityFilter(parent_id=snap.id), newest=False)
