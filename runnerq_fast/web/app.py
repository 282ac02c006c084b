"""The ASGI application: :func:`create_app`, its lifespan and its route table.

One Starlette app per call, holding everything it uses (no module-level
state), mountable in FastAPI, Starlette, Litestar or any ASGI server. The
route table (:func:`endpoints`) feeds both Starlette's router and the
generated OpenAPI document at ``/api/openapi.json``.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal
from urllib.parse import unquote_to_bytes

from msgspec import Meta
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import Receive, Scope, Send

from runnerq_fast.config import WorkerConfig
from runnerq_fast.errors import BackendError
from runnerq_fast.executor import MAX_IDEMPOTENCY_KEY_LENGTH
from runnerq_fast.filters import ACTIONS, ALL_STATUSES, MAX_ACTION_LIMIT, MAX_PAGE
from runnerq_fast.metrics import ACTIVITIES_ENQUEUED
from runnerq_fast.metrics.prometheus import PrometheusMetrics
from runnerq_fast.storage import Backend
from runnerq_fast.web import wire
from runnerq_fast.web.actions import ACTION_PATHS, ActionRoutes
from runnerq_fast.web.console import ConsoleRoutes, wants_html
from runnerq_fast.web.context import WebContext, WebLimits
from runnerq_fast.web.dashboard import DashboardRoutes
from runnerq_fast.web.enqueue import EnqueueRoutes
from runnerq_fast.web.guard import HostGuard, WriteGuard
from runnerq_fast.web.health import HealthRoutes
from runnerq_fast.web.metrics import MetricsRoute
from runnerq_fast.web.observability import MAX_LIMIT, MAX_OFFSET, ObservabilityRoutes
from runnerq_fast.web.openapi import Endpoint, Param, build_openapi
from runnerq_fast.web.responses import (
    JSON,
    JsonResponse,
    ProblemError,
    backend_error_handler,
    http_exception_handler,
    internal_error_handler,
    problem_exception_handler,
    problem_response,
)
from runnerq_fast.web.v1 import V1Routes

__all__ = ["RunnerQApp", "create_app", "endpoints"]

_QUEUE_PATH = Param("queue", "path", wire.QueueName, "Queue name, 1-255 characters, not blank, no NUL, not . or ..",
                    True)
_QUEUE_QUERY = Param("queue", "query", wire.OptionalQueueName,
                     "Queue name; default (absent or empty): the app's only queue, else 'default'.")
_ID = Param("id", "path", wire.Id, "Activity id (32 hex digits; the dashed UUID form is accepted).", True)
_OFFSET = Param("offset", "query", wire.int_range(0, MAX_OFFSET), "Items to skip (RunnerQ paging; at most 10,000).")
_LIMIT = Param("limit", "query", wire.int_range(1, MAX_LIMIT), "Most items returned (1-1000, default 50).")
_SSE = "text/event-stream"
_LIST_PARAMS = (
    Param("status", "query", wire.text_param(wire.STATUS_LIST_PATTERN),
          "Statuses, comma-separated or repeated (pending, scheduled, ...)."),
    Param("type", "query", wire.text_param(wire.NAME_LIST_PATTERN),
          "Activity types (each 1-255 characters), comma-separated or repeated."),
    Param("priority", "query", wire.text_param(wire.PRIORITY_LIST_PATTERN),
          "Priorities, 1-4 or low|normal|high|critical, comma-separated."),
    Param("created_after", "query", wire.text_param(wire.TIME_PATTERN, time=True),
          "RFC 3339 time with an offset (years 1971-6428): created at or after it."),
    Param("created_before", "query", wire.text_param(wire.TIME_PATTERN, time=True),
          "RFC 3339 time with an offset (years 1971-6428): created before it."),
    Param("metadata", "query", wire.text_param(wire.METADATA_PATTERN),
          "key=value (a key is needed); repeated, every pair must match."),
    Param("parent_id", "query", wire.OptionalName, "Only children of this activity."),
    Param("ids", "query", wire.text_param(wire.NAME_LIST_PATTERN),
          "Activity ids, comma-separated (at most 10,000)."),
)
_PAGE_PARAMS = (
    Param("limit", "query", wire.int_range(1, MAX_PAGE), "Most items (1-1000, default 50)."),
    Param("cursor", "query", wire.text_param(f"^$|{wire.CURSOR_PATTERN}"),
          "next_cursor of the previous page (opaque; other text is refused with 422)."),
    Param("order", "query", Literal["newest", "oldest"], "newest (default) or oldest first, by creation."),
)


class _Index:
    """``GET /``: the console page for a browser (``Accept: text/html``), else the JSON service index."""

    def __init__(self, ctx: WebContext, console: ConsoleRoutes) -> None:
        self.ctx = ctx
        self.console = console

    async def index(self, request: Request) -> Response:
        if wants_html(request):
            return self.console.page(request)
        root = request.scope.get("root_path", "")
        return JsonResponse(
            {
                "service": "runnerq-fast",
                "console": f"{root}/",
                "openapi": f"{root}/api/openapi.json",
                "metrics": f"{root}/metrics",
                "health": f"{root}/healthz",
                "read_only": self.ctx.read_only,
                "token_required": self.ctx.token is not None,
                "statuses": list(ALL_STATUSES),
                "actions": {path: sorted(ACTIONS[name]) for path, name in ACTION_PATHS.items()},
                "queues": list(self.ctx.queues) if self.ctx.queues is not None else None,
            },
            headers={"Vary": "Accept"},
        )


def endpoints(
    enq: EnqueueRoutes,
    obs: ObservabilityRoutes,
    v1: V1Routes,
    act: ActionRoutes,
    health: HealthRoutes,
    metrics: MetricsRoute,
    index: _Index,
    dash: DashboardRoutes,
) -> list[Endpoint]:
    """The route table of one app (Starlette routes and OpenAPI operations, in matching order)."""
    j = JSON
    one = "/api/v1/queues/{queue}/activities/{id}"
    done = {200: ("What the action did", wire.ActionResponse, j),
            409: ("The activity is not in a state the action applies to", wire.Problem, wire.PROBLEM_JSON)}
    return [
        Endpoint("GET", "/", index.index, "Service index (JSON); a browser (Accept: text/html) gets the console",
                 "service", responses={200: ("Where things are", None, j)}),
        Endpoint("GET", "/healthz", health.healthz, "Liveness: the process is up", "service",
                 responses={200: ("Up", wire.Health, j)}),
        Endpoint("GET", "/readyz", health.readyz, "Readiness: the backend answers", "service",
                 responses={200: ("Ready", wire.Health, j)}),
        Endpoint("GET", "/metrics", metrics.metrics, "Prometheus metrics (text format)", "service",
                 responses={200: ("Metrics", None, "text/plain; version=0.0.4")}),
        Endpoint(
            "POST", "/api/v1/queues/{queue}/activities", enq.enqueue_one, "Enqueue one activity", "enqueue",
            request=wire.ENQUEUE_BODY,
            responses={
                201: ("Stored (with ?wait=: and finished)", wire.EnqueueResponse, j),
                200: ("An idempotency key returned an existing activity", wire.EnqueueResponse, j),
                202: ("?wait= elapsed before the activity finished", wire.EnqueueResponse, j),
                409: ("A no_reuse idempotency key is taken (existing_id names its holder)", wire.Problem,
                      wire.PROBLEM_JSON),
            },
            params=(
                _QUEUE_PATH,
                Param("wait", "query", Annotated[float, Meta(extra_json_schema={
                    "minimum": 0, "maximum": enq.ctx.limits.max_wait})],
                      f"Seconds to hold the response until the activity finishes (0-{enq.ctx.limits.max_wait:g})."),
                Param("Idempotency-Key", "header", Annotated[str, Meta(extra_json_schema={
                    "minLength": 1, "maxLength": MAX_IDEMPOTENCY_KEY_LENGTH, "pattern": "^[^\\u0000]*$"})],
                      "Idempotency key (1-1024 characters), as the body's idempotency_key (they must not differ); "
                      "the same key with another body is 422."),
            ),
            writes=True,
        ),
        Endpoint(
            "POST", "/api/v1/queues/{queue}/activities/batch", enq.enqueue_batch,
            f"Enqueue up to {enq.ctx.limits.max_batch:,} activities in one round trip (all-or-nothing validation)",
            "enqueue",
            request=wire.BatchEnqueueRequest,
            responses={
                201: ("Stored", wire.BatchEnqueueResponse, j),
                200: ("Nothing new was stored (idempotency keys)", wire.BatchEnqueueResponse, j),
            },
            params=(_QUEUE_PATH,),
            writes=True,
        ),
        Endpoint("GET", "/api/v1/queues", v1.queues, "Every queue with counts by status and by type", "inspection",
                 responses={200: ("Queues", wire.QueuesResponse, j)}),
        Endpoint("GET", "/api/v1/workers", dash.workers, "Live workers (the worker registry)", "inspection",
                 responses={200: ("Workers", wire.WorkersResponse, j)},
                 params=(Param("queue", "query", wire.OptionalName,
                               "Only this queue's workers (empty: the default queue); default: every served queue."),)),
        Endpoint("GET", "/api/v1/queues/{queue}/dashboard", dash.dashboard,
                 "One queue's dashboard: counts, 15-minute series, unhandled types, workers (cached ~1 s)",
                 "inspection", responses={200: ("The dashboard", wire.DashboardView, j)}, params=(_QUEUE_PATH,)),
        Endpoint("GET", "/api/v1/queues/{queue}", v1.queue, "One queue's counts by status and by type",
                 "inspection", responses={200: ("The queue", wire.QueueView, j)}, params=(_QUEUE_PATH,)),
        Endpoint("GET", "/api/v1/queues/{queue}/activities", v1.list_activities,
                 "Activities matching a filter, one keyset page", "inspection",
                 responses={200: ("A page", wire.ActivityPageView, j)},
                 params=(_QUEUE_PATH, *_LIST_PARAMS, *_PAGE_PARAMS)),
        Endpoint("GET", "/api/v1/queues/{queue}/activities/count", v1.count,
                 "How many activities match a filter (bounded by ?cap=)", "inspection",
                 responses={200: ("The count", wire.CountView, j)},
                 params=(_QUEUE_PATH, *_LIST_PARAMS,
                         Param("cap", "query", wire.int_range(1, MAX_ACTION_LIMIT),
                               "Stop counting here (1-100,000, default 10,000)."))),
        Endpoint("GET", one, v1.detail, "One activity with its events, result and children", "inspection",
                 responses={200: ("The activity", wire.ActivityDetail, j)}, params=(_QUEUE_PATH, _ID)),
        Endpoint("GET", one + "/children", v1.children, "Child activities, oldest first", "inspection",
                 responses={200: ("A page", wire.ActivityPageView, j)},
                 params=(_QUEUE_PATH, _ID, *_PAGE_PARAMS[:2])),
        Endpoint("POST", one + "/retry", act.retry, "Retry a failed, dead-lettered or cancelled activity",
                 "actions", responses=done, params=(_QUEUE_PATH, _ID), writes=True),
        Endpoint("POST", one + "/cancel", act.cancel, "Cancel an activity (a running one is asked to stop)",
                 "actions", responses=done, params=(_QUEUE_PATH, _ID), writes=True),
        Endpoint("POST", one + "/run-now", act.run_now, "Make a scheduled or retrying activity ready now",
                 "actions", responses=done, params=(_QUEUE_PATH, _ID), writes=True),
        Endpoint("POST", one + "/priority", act.set_priority, "Change the priority of one that has not started",
                 "actions", request=wire.PriorityRequest, responses=done, params=(_QUEUE_PATH, _ID), writes=True),
        Endpoint("DELETE", one, act.delete, "Delete a finished activity with its events", "actions",
                 responses=done, params=(_QUEUE_PATH, _ID), writes=True),
        *(
            Endpoint("POST", f"/api/v1/queues/{{queue}}/actions/{name}", act.bulk_route(name),
                     f"{name} on many activities: by ids, by the listing's filter, or both", "actions",
                     request=wire.SET_PRIORITY_BODY if name == "set-priority" else wire.ACTION_BODY,
                     responses={200: ("What the action did", wire.ActionResponse, j)},
                     params=(_QUEUE_PATH,), writes=True)
            for name in ACTION_PATHS
        ),
        Endpoint("POST", "/api/v1/queues/{queue}/actions/{action}", act.bulk,
                 "Any other action: 404 naming the actions", "actions", writes=True, documented=False),
        Endpoint("GET", "/api/observability/stats", obs.stats, "Counts by status (RunnerQ)", "observability",
                 responses={200: ("Counts", wire.RunnerQStats, j)}, params=(_QUEUE_QUERY,)),
        Endpoint(
            "GET", "/api/observability/activities/{key}", obs.activities,
            "Activities of one status, newest first, or one activity by id (RunnerQ)", "observability",
            responses={200: ("A list of activities, or one", list[wire.ActivityView] | wire.ActivityView, j)},
            params=(Param("key", "path", Literal[ALL_STATUSES] | wire.Id,
                          "A status (pending, processing, ...) or an activity id.", True),
                    _QUEUE_QUERY, _OFFSET, _LIMIT),
        ),
        Endpoint("GET", "/api/observability/activities/{id}/events", obs.events,
                 "The latest events of an activity, oldest first (RunnerQ)", "observability",
                 responses={200: ("Events", list[wire.EventView], j)}, params=(_ID, _LIMIT)),
        Endpoint("GET", "/api/observability/activities/{id}/result", obs.result,
                 "The stored outcome of an activity; null while unfinished (RunnerQ)", "observability",
                 responses={200: ("Result", wire.ResultView | None, j)}, params=(_ID,)),
        Endpoint("GET", "/api/observability/dead-letter", obs.dead_letter,
                 "Dead-lettered activities, newest first (RunnerQ)", "observability",
                 responses={200: ("Dead letters", list[wire.DeadLetterView], j)},
                 params=(_QUEUE_QUERY, _OFFSET, _LIMIT)),
        Endpoint(
            "GET", "/api/observability/stream", obs.stream,
            "Live events as Server-Sent Events; Last-Event-ID or ?after= resumes", "observability",
            responses={200: ("An event stream; each data line is an EventView without traceback", None, _SSE)},
            params=(_QUEUE_QUERY,
                    Param("after", "query", wire.int_range(0, 2**63 - 1),
                          "Resume after this event id (as Last-Event-ID)."),
                    Param("Last-Event-ID", "header", wire.int_range(0, 2**63 - 1),
                          "Resume after this event id (wins over ?after=).")),
        ),
    ]


_PREFIX = "/api/v1/queues/"
_SUFFIX = "/activities"


_NOT_UTF8 = "the request path is not UTF-8 once percent-decoded (an escape such as %FF); percent-encode names as UTF-8"


def _path_is_utf8(scope: Scope) -> bool:
    """Whether the request's raw path percent-decodes to valid UTF-8 (True when the server gave no ``raw_path``)."""
    raw = scope.get("raw_path")
    if not raw:
        return True
    try:
        unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class RunnerQApp(Starlette):
    """The Starlette app, with ``POST /api/v1/queues/{queue}/activities`` served directly.

    The single-activity enqueue is the hot route: it skips Starlette's router,
    middleware and Request/Response objects and calls
    :meth:`~runnerq_fast.web.enqueue.EnqueueRoutes.asgi_one`, the same code
    the routed endpoint runs (which answers when the direct path is off: with
    CORS configured). Everything else goes through Starlette as usual.
    """

    direct_enqueue: EnqueueRoutes | None = None
    host_guard: HostGuard = HostGuard(None)
    write_guard: WriteGuard = WriteGuard(None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self._refusal(scope)
            if refusal is not None:
                await problem_response(refusal.status, refusal.detail, instance=scope["path"],
                                       headers=refusal.headers)(scope, receive, send)
                return
        enq = self.direct_enqueue
        if enq is not None and scope["type"] == "http" and scope["method"] == "POST":
            path: str = scope["path"]
            root: str = scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root):]
            if path.startswith(_PREFIX) and path.endswith(_SUFFIX):
                queue = path[len(_PREFIX):-len(_SUFFIX)]
                if queue and "/" not in queue:
                    scope["app"] = self
                    await enq.asgi_one(scope, receive, send, queue)
                    return
        await super().__call__(scope, receive, send)

    def _refusal(self, scope: Scope) -> ProblemError | None:
        """What refuses this request before any route: a path that is not UTF-8, a ``Host`` the app does not
        answer, a cross-site write or a write whose body is not JSON (see :mod:`runnerq_fast.web.guard`)."""
        if "\ufffd" in scope["path"] and not _path_is_utf8(scope):
            # the server decoded an escape such as %FF to U+FFFD: refuse it rather than name a queue "q\ufffd"
            return ProblemError(400, _NOT_UTF8)
        headers = scope["headers"]
        host = None
        for name, value in headers:
            if name == b"host":
                host = value.decode("latin-1")
                break
        if not self.host_guard.allows(host, scope.get("server")):
            assert host is not None
            return self.host_guard.refusal(host)
        if self.write_guard.applies(scope["method"]):
            try:
                self.write_guard.check(headers)
            except ProblemError as exc:
                return exc
        return None


def create_app(
    backend_or_url: Backend | str,
    *,
    queues: Sequence[str] | None = None,
    token: str | None = None,
    read_only: bool = False,
    metrics: PrometheusMetrics | None = None,
    config: WorkerConfig | None = None,
    limits: WebLimits | None = None,
    cors_origins: Sequence[str] | None = None,
    allowed_hosts: Sequence[str] | None = None,
    enqueue_batch: int = 1000,
    sse_keepalive: float = 15.0,
    sse_buffer: int = 10_000,
    sse_flush_interval: float = 0.1,
    sse_grace: float = 2.0,
    gauge_ttl: float = 2.0,
    dashboard_ttl: float = 1.0,
) -> RunnerQApp:
    """The runnerq-fast HTTP service as one ASGI application.

    Parameters
    ----------
    backend_or_url : Backend or str
        An opened backend (the caller keeps closing it) or a backend URL,
        opened by the app's lifespan (or at its first request when mounted
        where the lifespan does not run) and closed at shutdown.
    queues : sequence of str, optional
        The queues served; any other queue is 404. Default ``None``: any
        queue. ``?queue=`` defaults to the only one given, else ``default``.
    token : str, optional
        Bearer token every mutating route (enqueue, actions) requires,
        compared in constant time. Default ``None``: no authentication.
    read_only : bool
        Serve GET requests only (mutating routes answer 405). Default False.
    metrics : PrometheusMetrics, optional
        The sink ``/metrics`` serves (pass the engine's to serve its
        counters); default: the app's own, counting what it enqueues.
    config : WorkerConfig, optional
        Enqueue defaults and limits (retries, timeout, payload size,
        idempotency TTL), as for :class:`~runnerq_fast.ActivityExecutor`.
    limits : WebLimits, optional
        Body, batch and long-poll limits.
    cors_origins : sequence of str, optional
        Origins allowed by CORS (``*``: any). Default ``None``: CORS is off.
        These origins may also write from a browser; every other origin's
        writes are 403 (see :mod:`runnerq_fast.web.guard`).
    allowed_hosts : sequence of str, optional
        ``Host`` names answered besides the loopback ones (``localhost``,
        127.0.0.1, ``[::1]``) and the address the client connected to, any
        port: ``example.com``, ``.example.com`` (it and its subdomains),
        ``*`` (any). Default ``None``: on a connection to a loopback address
        only those, on any other connection any ``Host``. Other ``Host``
        values get 400 before any route (DNS rebinding).
    enqueue_batch : int
        Most single-activity requests coalesced into one backend call. Default 1000.
    sse_keepalive : float
        Seconds between keepalive comments on an idle event stream. Default 15.
    sse_buffer : int
        Most events a stream client may lag before it is told to resync (the
        size of each queue's shared ring of recent events). Default 10,000.
    sse_flush_interval : float
        Shortest time between two sends to a stream client while events
        flow, seconds. Default 0.1.
    sse_grace : float
        Seconds a queue's shared event reader runs on after its last stream
        client left. Default 2.
    gauge_ttl : float
        Seconds a backend reading of the depth gauges is reused. Default 2.
    dashboard_ttl : float
        Seconds a queue's ``/dashboard`` body is reused, however many clients
        poll it. Default 1.

    Returns
    -------
    RunnerQApp
        A :class:`starlette.applications.Starlette` app; ``app.state.runnerq`` is
        its :class:`~runnerq_fast.web.context.WebContext`.

    Raises
    ------
    TypeError
        If ``backend_or_url`` is neither a Backend nor a non-empty URL.
    ValueError, InvalidActivityError
        For an invalid queue name or limit, a blank token, a token no HTTP
        header can carry (a character outside Latin-1, a control character),
        or an ``allowed_hosts`` entry that is not a host name.
    """
    host_guard = HostGuard(allowed_hosts)
    ctx = WebContext(
        backend_or_url,
        queues=queues,
        token=token,
        read_only=read_only,
        config=config or WorkerConfig(),
        limits=limits or WebLimits(),
        enqueue_batch=enqueue_batch,
    )
    sink = metrics if metrics is not None else PrometheusMetrics()

    def on_created(queue: str, activity_type: str, n: int) -> None:
        sink.count(ACTIVITIES_ENQUEUED, (queue, activity_type), n)

    enq = EnqueueRoutes(ctx, on_created)
    obs = ObservabilityRoutes(ctx, sse_keepalive=sse_keepalive, sse_buffer=sse_buffer,
                               sse_flush_interval=sse_flush_interval, sse_grace=sse_grace)
    health = HealthRoutes(ctx)
    metrics_route = MetricsRoute(ctx, sink, gauge_ttl)
    dash = DashboardRoutes(ctx, dashboard_ttl)
    console = ConsoleRoutes()
    table = endpoints(enq, obs, V1Routes(ctx), ActionRoutes(ctx), health, metrics_route, _Index(ctx, console), dash)
    openapi_doc: dict[str, Any] = {}

    async def openapi(request: Request) -> Response:
        if not openapi_doc:
            doc = build_openapi(table, title="runnerq-fast", version=_version(), token=token is not None,
                                read_only=read_only)
            batch = doc["components"]["schemas"].get("BatchEnqueueRequest")
            if batch is not None:  # the app's own limit (a longer batch is answered 413)
                batch["properties"]["activities"]["maxItems"] = ctx.limits.max_batch
            openapi_doc.update(doc)
        return JsonResponse(openapi_doc)

    async def docs_redirect(request: Request) -> Response:
        return RedirectResponse(f"{request.scope.get('root_path', '')}/api/openapi.json")

    routes: list[BaseRoute] = _routes(table, read_only)
    routes.append(Route("/api/openapi.json", openapi, methods=["GET"]))
    routes.append(Route("/api", docs_redirect, methods=["GET"]))
    routes.append(Mount("/console", console.files, name="console"))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await ctx.open()
        await dash.watch_served()
        try:
            yield
        finally:
            await dash.close()
            await ctx.close()

    middleware = []
    if cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["GET", "POST", "DELETE", "PATCH"],
                allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID"],
                expose_headers=["Location"],
            )
        )
    app = RunnerQApp(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={
            ProblemError: problem_exception_handler,
            HTTPException: http_exception_handler,
            BackendError: backend_error_handler,
            Exception: internal_error_handler,
        },
    )
    if not cors_origins:
        app.direct_enqueue = enq
    app.host_guard = host_guard
    app.write_guard = WriteGuard(cors_origins)
    app.state.runnerq = ctx
    app.state.runnerq_streams = obs.streams
    app.state.runnerq_hubs = obs.hubs
    app.state.runnerq_metrics = metrics_route
    app.state.runnerq_dashboard = dash
    return app


def _by_method(
    handlers: dict[str, Callable[[Request], Awaitable[Response]]],
) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint of one path served with several methods: one route, so that a 405 from Starlette's router
    names every method of the path in ``Allow`` (a route per method named only its own)."""

    async def endpoint(request: Request) -> Response:
        return await handlers["GET" if request.method == "HEAD" else request.method](request)

    return endpoint


def _read_only_allow(
    handler: Callable[[Request], Awaitable[Response]], allow: str
) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` whose read-only 405 names ``allow``, the methods its path serves on a read-only app."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except ProblemError as exc:
            if exc.status == 405:
                exc.headers["Allow"] = allow
            raise

    endpoint.__name__ = getattr(handler, "__name__", "endpoint")
    return endpoint


def _routes(table: Sequence[Endpoint], read_only: bool) -> list[BaseRoute]:
    """One Starlette route per path of ``table``, in the table's order (the first endpoint of a path places it).

    On a read-only app a write answers 405 as before (the write's own check says why), with an ``Allow``
    header naming the path's read methods.
    """
    by_path: dict[str, list[Endpoint]] = {}
    for ep in table:
        by_path.setdefault(ep.path, []).append(ep)
    routes: list[BaseRoute] = []
    for path, eps in by_path.items():
        reads = [ep.method for ep in eps if not ep.writes]
        allow = ", ".join(reads + (["HEAD"] if "GET" in reads else []))
        handlers = {ep.method: _read_only_allow(ep.handler, allow) if read_only and ep.writes else ep.handler
                    for ep in eps}
        endpoint = next(iter(handlers.values())) if len(handlers) == 1 else _by_method(handlers)
        if read_only and reads != [ep.method for ep in eps]:
            routes.append(_ReadOnlyRoute(path, endpoint, methods=list(handlers), allow=allow))
        else:
            routes.append(Route(path, endpoint, methods=list(handlers)))
    return routes


class _ReadOnlyRoute(Route):
    """A route of a read-only app whose path also has writes: the writes stay routed (their own check answers
    405 saying why), and any 405, from Starlette's router too (``OPTIONS``, ``PUT``...), names in ``Allow``
    only ``allow``, the read methods its document gives."""

    def __init__(self, path: str, endpoint: Callable[[Request], Awaitable[Response]], *, methods: list[str],
                 allow: str) -> None:
        super().__init__(path, endpoint, methods=methods)
        self.allow = allow

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.methods and scope["method"] not in self.methods:
            raise HTTPException(status_code=405, headers={"Allow": self.allow})
        await super().handle(scope, receive, send)


def _version() -> str:
    try:
        return importlib.metadata.version("runnerq-fast")
    except importlib.metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "0"
