"""Operator actions over HTTP: retry, cancel (also running), run now, change priority, delete.

Each one by id (``POST /api/v1/queues/{queue}/activities/{id}/retry`` ...,
``DELETE .../activities/{id}``) and in bulk (``POST
/api/v1/queues/{queue}/actions/{action}`` with ``ids``, a ``filter`` — the
listing's, as JSON — or both). The store records each change as an event
(``retry_requested``, ``cancelled`` / ``cancel_requested``, ``run_now``,
``priority_changed``, ``deleted``); the app also logs every action. All are
writes: they need the bearer token when one is configured, and a read-only
app refuses them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from runnerq_fast.errors import InvalidActivityError
from runnerq_fast.filters import ACTIONS, check_action_limit
from runnerq_fast.models import ActionResult, ActivityFilter
from runnerq_fast.storage import Backend
from runnerq_fast.web.context import WebContext
from runnerq_fast.web.filtering import filter_from_body, parse_priority
from runnerq_fast.web.observability import normalize_id
from runnerq_fast.web.responses import JsonResponse, ProblemError, decode_body, read_body
from runnerq_fast.web.wire import ActionRequest, ActionResponse, PriorityRequest, integral

__all__ = ["ACTION_PATHS", "ActionRoutes"]

log = logging.getLogger("runnerq_fast.web")

ACTION_PATHS = {"retry": "retry", "cancel": "cancel", "run-now": "run_now", "set-priority": "set_priority",
                "delete": "delete"}
"""URL name of each action -> its name in :data:`runnerq_fast.filters.ACTIONS`."""

_ACTION_BODY_LIMIT = 2 * 1024 * 1024  # 10,000 ids fit with room to spare


def _call(backend: Backend, action: str, priority: int | None) -> Callable[..., Awaitable[ActionResult]]:
    if action == "retry":
        return backend.retry_activities
    if action == "cancel":
        return backend.cancel_activities
    if action == "run_now":
        return backend.run_now
    if action == "delete":
        return backend.delete_activities
    assert action == "set_priority" and priority is not None

    async def set_priority(queue: str, flt: ActivityFilter, *, limit: int) -> ActionResult:
        return await backend.set_priority(queue, flt, priority, limit=limit)

    return set_priority


def _response(res: ActionResult) -> Response:
    return JsonResponse(ActionResponse(res.action, res.changed, len(res.changed), res.skipped))


class ActionRoutes:
    """The action endpoints of one app."""

    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    async def _run(self, request: Request, queue: str, action: str, flt: ActivityFilter, limit: int,
                   priority: int | None, how: str) -> ActionResult:
        backend = await self.ctx.backend()
        try:
            res = await _call(backend, action, priority)(queue, flt, limit=limit)
        except InvalidActivityError as exc:
            raise ProblemError(422, str(exc)) from None
        client = request.client.host if request.client else "?"
        log.info("action %s on queue %r %s from %s: %d changed, %d skipped", action, queue, how, client,
                 len(res.changed), res.skipped)
        return res

    # ------------------------------------------------------------ one activity
    async def _one(self, request: Request, action: str, priority: int | None = None) -> Response:
        ctx = self.ctx
        ctx.require_write(request)
        queue = ctx.queue(request.path_params["queue"])
        raw_id = request.path_params["id"]
        key = normalize_id(raw_id)
        if key is None:
            raise ProblemError(404, f"no activity {raw_id!r} in queue {queue!r}")
        res = await self._run(request, queue, action, ActivityFilter(ids=(key,)), 1, priority, f"on {key}")
        if res.changed:
            return _response(res)
        snap = await (await ctx.backend()).get_activity(key)
        if snap is None or snap.queue != queue:
            raise ProblemError(404, f"no activity {raw_id!r} in queue {queue!r}")
        if action == "set_priority" and snap.priority == priority and snap.status in ACTIONS[action]:
            return _response(res)  # already there: nothing to do, not a conflict
        applies = ", ".join(sorted(ACTIONS[action]))
        raise ProblemError(409, f"activity {key} is {snap.status}; {action} applies to {applies}")

    async def retry(self, request: Request) -> Response:
        """``POST .../activities/{id}/retry``: a failed, dead-lettered or cancelled activity runs again."""
        return await self._one(request, "retry")

    async def cancel(self, request: Request) -> Response:
        """``POST .../activities/{id}/cancel``: cancel it (a running one is asked to stop)."""
        return await self._one(request, "cancel")

    async def run_now(self, request: Request) -> Response:
        """``POST .../activities/{id}/run-now``: a scheduled or retrying activity is ready now."""
        return await self._one(request, "run_now")

    async def delete(self, request: Request) -> Response:
        """``DELETE .../activities/{id}``: delete a finished activity with its events."""
        return await self._one(request, "delete")

    async def set_priority(self, request: Request) -> Response:
        """``POST .../activities/{id}/priority`` with ``{"priority": ...}``: for one that has not started."""
        self.ctx.require_write(request)
        body = decode_body(await read_body(request, 64 * 1024), PriorityRequest)
        assert isinstance(body, PriorityRequest)
        try:
            priority = parse_priority(body.priority)
        except InvalidActivityError as exc:
            raise ProblemError(422, str(exc)) from None
        return await self._one(request, "set_priority", priority)

    # ------------------------------------------------------------------ bulk
    def bulk_route(self, name: str) -> Callable[[Request], Awaitable[Response]]:
        """The endpoint of ``POST /api/v1/queues/{queue}/actions/<name>`` (one per action, so the
        OpenAPI document gives each its own body: ``priority`` is for ``set-priority`` only)."""

        async def endpoint(request: Request) -> Response:
            return await self._bulk(request, name)

        endpoint.__name__ = endpoint.__qualname__ = "bulk_" + ACTION_PATHS[name]
        return endpoint

    async def bulk(self, request: Request) -> Response:
        """``POST /api/v1/queues/{queue}/actions/{action}``: by ids, by filter, or both."""
        return await self._bulk(request, request.path_params["action"])

    async def _bulk(self, request: Request, name: str) -> Response:
        ctx = self.ctx
        ctx.require_write(request)
        queue = ctx.queue(request.path_params["queue"])
        action = ACTION_PATHS.get(name)
        if action is None:
            raise ProblemError(404, f"no action {name!r}; actions: {', '.join(ACTION_PATHS)}")
        body = decode_body(await read_body(request, _ACTION_BODY_LIMIT), ActionRequest)
        assert isinstance(body, ActionRequest)
        flt = filter_from_body(body.filter, body.ids)
        try:
            limit = check_action_limit(integral(body.limit))
            priority = None
            if action == "set_priority":
                if body.priority is None:
                    raise InvalidActivityError('set-priority needs "priority" (1-4 or low, normal, high, critical)')
                priority = parse_priority(body.priority)
            elif body.priority is not None:
                raise InvalidActivityError(f'"priority" is for set-priority only, not {name}')
        except InvalidActivityError as exc:
            raise ProblemError(422, str(exc)) from None
        how = "by " + " and ".join(k for k, v in (("ids", body.ids), ("filter", body.filter)) if v is not None)
        res = await self._run(request, queue, action, flt, limit, priority, how)
        return _response(res)
