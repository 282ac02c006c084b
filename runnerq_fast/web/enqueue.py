"""The enqueue routes: one activity, a batch, ``Idempotency-Key``, and ``?wait=`` long-polls.

``POST /api/v1/queues/{queue}/activities`` and ``.../activities/batch``.
Every activity goes through :class:`runnerq_fast.ActivityBuilder`, so HTTP
refuses exactly what the Python API refuses (422, nothing stored). Single
requests are coalesced by the queue's :class:`~runnerq_fast.web.buffer.EnqueueBuffer`;
a batch is one ``Backend.enqueue`` call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from runnerq_fast.codec import decode_json
from runnerq_fast.errors import InvalidActivityError, RunnerQError
from runnerq_fast.executor import ActivityBuilder, ActivityExecutor
from runnerq_fast.models import ActivityResult, EnqueueOutcome, EnqueueResult, NewActivity, OnDuplicate
from runnerq_fast.storage import Backend
from runnerq_fast.web.context import WebContext
from runnerq_fast.web.filtering import parse_priority
from runnerq_fast.web.responses import (
    JSON,
    JsonResponse,
    ProblemError,
    decode_body,
    header_map,
    problem_bytes,
    read_asgi_body,
    read_body,
)
from runnerq_fast.web.wire import (
    NUMBER_TEXT,
    PROBLEM_JSON,
    RUN_AT_PATTERN,
    BatchEnqueueRequest,
    BatchEnqueueResponse,
    BatchItemOutcome,
    BatchOutcome,
    EnqueueRequest,
    EnqueueResponse,
    ItemError,
    checked_result,
    encode,
    integral,
    parse_time,
)

__all__ = ["EnqueueRoutes", "build_activity"]

log = logging.getLogger("runnerq_fast.web")

_ON_DUPLICATE = {o.name.lower(): o for o in OnDuplicate}
_OUTCOME_NAMES: dict[int, BatchOutcome] = {EnqueueOutcome.CREATED: "created", EnqueueOutcome.EXISTING: "existing",
                  EnqueueOutcome.REJECTED: "conflict"}


def build_activity(ex: ActivityExecutor, req: EnqueueRequest, key: str | None = None) -> NewActivity:
    """Validate one request with the Python API's builder and encode it.

    Parameters
    ----------
    ex : ActivityExecutor
        The queue's executor (defaults and limits).
    req : EnqueueRequest
        The decoded request.
    key : str or None
        The ``Idempotency-Key`` header, if any.

    Raises
    ------
    InvalidActivityError
        Anything the Python API refuses, and ``delay`` with ``run_at``, and a
        header key that differs from the body's ``idempotency_key``.
    """
    b: ActivityBuilder = ex.activity(req.type).payload(req.payload)
    if req.priority is not None:
        b.priority(parse_priority(req.priority))
    if req.delay is not None and req.run_at is not None:
        raise InvalidActivityError("give delay or run_at, not both")
    if req.delay is not None:
        b.delay(req.delay)
    elif req.run_at is not None:
        b.run_at(parse_time(req.run_at, RUN_AT_PATTERN, "run_at"))
    if req.max_retries is not None:
        b.max_retries(integral(req.max_retries))
    if req.timeout is not None:
        b.timeout(req.timeout)
    if req.metadata is not None:
        b.metadata(req.metadata)
    if key is not None and req.idempotency_key is not None and key != req.idempotency_key:
        raise InvalidActivityError(
            f"the Idempotency-Key header {key!r} differs from the body's idempotency_key {req.idempotency_key!r}"
        )
    key = key if key is not None else req.idempotency_key
    if key is not None:
        b.idempotency_key(key, _ON_DUPLICATE[req.on_duplicate])
    return b.build()


def _check_json_type(ctype: str | None) -> None:
    if ctype is None:
        return
    media = ctype.split(";", 1)[0].strip().lower()
    if media != JSON and not media.endswith("+json"):
        raise ProblemError(415, f"send the body as application/json, not {media!r}")


def _wait_param(query_string: bytes, max_wait: float) -> float | None:
    if b"wait" not in query_string:
        return None
    text = parse_qs(query_string.decode("latin-1"), keep_blank_values=True).get("wait", [None])[-1]
    if text is None:
        return None
    if NUMBER_TEXT.fullmatch(text) is None:  # not float(): it takes " 1", "1_0", "nan", "inf"
        raise ProblemError(422, f"wait must be a number of seconds, got {text!r}")
    wait = float(text)
    if not math.isfinite(wait) or not 0 <= wait <= max_wait:
        raise ProblemError(422, f"wait must be within [0, {max_wait:g}] seconds, got {text!r}")
    return wait


def _stored_matches(stored_payload: bytes | str, stored_meta: dict[str, str], item: NewActivity,
                    snap_fields: tuple[int, int, int]) -> bool:
    """Whether a stored activity came from the same request body as ``item``."""
    if snap_fields != (item.priority, item.max_retries, item.timeout_ms):
        return False
    return bool(decode_json(stored_payload) == decode_json(item.payload)
                and stored_meta == (decode_json(item.metadata) if item.metadata else {}))


class EnqueueRoutes:
    """The enqueue endpoints of one app.

    Parameters
    ----------
    ctx : WebContext
        The app's state.
    on_created : callable, optional
        Called as ``on_created(queue, activity_type, n)`` for every stored
        activity (the app's ``runnerq_activities_enqueued_total`` counter).
    """

    def __init__(self, ctx: WebContext, on_created: Callable[[str, str, int], None] | None = None) -> None:
        self.ctx = ctx
        self.on_created = on_created

    @staticmethod
    def _location(root: str, queue: str, activity_id: str) -> str:
        # percent-encoded: a header is Latin-1, a queue name any Unicode text (a "€" made a 500 after storing)
        return f"{root}/api/v1/queues/{quote(queue, safe='')}/activities/{quote(activity_id, safe='')}"

    async def handle_one(self, scope: Scope, receive: Receive, queue_name: str) -> tuple[int, dict[str, str], Any]:
        """Enqueue the activity of one request: (status, headers, body Struct).

        The transport-neutral core of ``POST /api/v1/queues/{queue}/activities``,
        used by the Starlette route and by the app's direct path (:meth:`asgi_one`).

        Raises
        ------
        ProblemError
            For every refusal (401, 405, 400, 413, 415, 422, 404, 409, 503).
        """
        ctx = self.ctx
        headers = header_map(scope)
        ctx.check_write(headers.get("authorization"))
        queue = ctx.queue(queue_name)
        wait = _wait_param(scope.get("query_string", b""), ctx.limits.max_wait)
        _check_json_type(headers.get("content-type"))
        raw = await read_asgi_body(receive, headers.get("content-length"), ctx.limits.max_body_bytes)
        req: EnqueueRequest = decode_body(raw, EnqueueRequest)
        header_key = headers.get("idempotency-key")
        ex = await ctx.executor(queue)
        try:
            item = build_activity(ex, req, header_key)
        except InvalidActivityError as exc:
            raise ProblemError(422, str(exc)) from None
        buf = await ctx.buffer(queue)
        try:
            res = await buf.submit(item)
        except InvalidActivityError as exc:
            raise ProblemError(422, str(exc)) from None
        except RuntimeError as exc:
            raise ProblemError(503, str(exc), headers={"Retry-After": "1"}) from None
        except RunnerQError as exc:
            raise ProblemError(503, f"the backend failed: {type(exc).__name__}: {exc}") from None
        root = scope.get("root_path", "")
        if res.outcome == EnqueueOutcome.REJECTED:
            raise ProblemError(
                409,
                f"idempotency key {item.idempotency_key!r} is already used by activity {res.activity_id} "
                "(on_duplicate=no_reuse)",
                existing_id=res.activity_id,
                headers={"Location": self._location(root, queue, res.activity_id)},
            )
        created = res.outcome == EnqueueOutcome.CREATED
        if created and self.on_created is not None:
            self.on_created(queue, item.activity_type, 1)
        if not created and header_key is not None:
            await self._check_same_body(ex, res, item, header_key)
        out_headers = {"Location": self._location(root, queue, res.activity_id)}
        body = EnqueueResponse(id=res.activity_id, queue=queue, created=created)
        if wait is not None:
            outcome = await _wait_result(ex.backend, res.activity_id, wait, ctx.shutting_down)
            if outcome is None:
                body.status = "pending"
                snap = await ex.backend.get_activity(res.activity_id)
                if snap is not None:
                    body.status = snap.status
                return 202, out_headers, body
            _add_outcome(body, outcome)
        return (201 if created else 200), out_headers, body

    async def enqueue_one(self, request: Request) -> Response:
        """``POST /api/v1/queues/{queue}/activities``: one activity."""
        status, headers, body = await self.handle_one(request.scope, request.receive, request.path_params["queue"])
        return JsonResponse(body, status, headers)

    async def asgi_one(self, scope: Scope, receive: Receive, send: Send, queue_name: str) -> None:
        """The same route as plain ASGI, without Starlette's router, middleware and Request/Response
        objects (the app's hot path; see :class:`runnerq_fast.web.app.RunnerQApp`)."""
        try:
            status, headers, body = await self.handle_one(scope, receive, queue_name)
            data = encode(body)
            media = b"application/json"
        except ProblemError as exc:
            status, headers = exc.status, exc.headers
            data = problem_bytes(exc, scope["path"])
            media = PROBLEM_JSON.encode()
        except Exception:
            log.exception("POST %s failed", scope.get("path"))
            status, headers, media = 500, {}, PROBLEM_JSON.encode()
            data = problem_bytes(ProblemError(500, "internal error (see the server log)"), scope.get("path", ""))
        raw_headers = [(b"content-type", media), (b"content-length", b"%d" % len(data))]
        raw_headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw_headers})
        await send({"type": "http.response.body", "body": data})

    async def _check_same_body(self, ex: ActivityExecutor, res: EnqueueResult, item: NewActivity, key: str) -> None:
        snap = await ex.backend.get_activity(res.activity_id)
        if snap is None:
            return
        same = _stored_matches(snap.payload, snap.metadata, item, (snap.priority, snap.max_retries, snap.timeout_ms))
        if not same:
            raise ProblemError(
                422,
                f"Idempotency-Key {key!r} was first used with a different request body (activity "
                f"{res.activity_id}); use a new key for a different request",
                existing_id=res.activity_id,
            )

    async def enqueue_batch(self, request: Request) -> Response:
        """``POST /api/v1/queues/{queue}/activities/batch``: up to 10,000 activities, all or nothing."""
        ctx = self.ctx
        ctx.require_write(request)
        queue = ctx.queue(request.path_params["queue"])
        if request.headers.get("idempotency-key") is not None:
            raise ProblemError(400, "a batch takes an idempotency_key per activity, not an Idempotency-Key header")
        _check_json_type(request.headers.get("content-type"))
        req: BatchEnqueueRequest = decode_body(
            await read_body(request, ctx.limits.max_batch_body_bytes), BatchEnqueueRequest
        )
        n = len(req.activities)
        if n > ctx.limits.max_batch:
            raise ProblemError(413, f"a batch holds at most {ctx.limits.max_batch} activities, got {n}")
        ex = await ctx.executor(queue)
        items: list[NewActivity] = []
        errors: list[ItemError] = []
        for i, one in enumerate(req.activities):
            try:
                items.append(build_activity(ex, one))
            except InvalidActivityError as exc:
                errors.append(ItemError(i, str(exc)))
        if errors:
            raise ProblemError(
                422,
                f"{len(errors)} of {n} activities are invalid; nothing was stored (see errors)",
                errors=errors[:100],
            )
        if not items:
            return JsonResponse(BatchEnqueueResponse(queue, []), 200)
        try:
            results = await ex.backend.enqueue(queue, items)
        except InvalidActivityError as exc:
            raise ProblemError(422, f"{exc}; nothing was stored") from None
        except RunnerQError as exc:
            raise ProblemError(503, f"the backend failed: {type(exc).__name__}: {exc}") from None
        outcomes = [BatchItemOutcome(r.activity_id, _OUTCOME_NAMES[r.outcome]) for r in results]
        created_any = False
        if self.on_created is not None:
            counts: dict[str, int] = {}
            for item, r in zip(items, results, strict=True):
                if r.outcome == EnqueueOutcome.CREATED:
                    counts[item.activity_type] = counts.get(item.activity_type, 0) + 1
            for activity_type, k in counts.items():
                self.on_created(queue, activity_type, k)
            created_any = bool(counts)
        else:
            created_any = any(r.outcome == EnqueueOutcome.CREATED for r in results)
        return JsonResponse(BatchEnqueueResponse(queue, outcomes), 201 if created_any else 200)


async def _wait_result(backend: Backend, activity_id: str, wait: float, stop: asyncio.Event) -> ActivityResult | None:
    """The result once the activity ends, ``None`` after ``wait`` seconds or when ``stop`` is set."""
    if stop.is_set():
        return await backend.get_result(activity_id)
    waiter = asyncio.ensure_future(backend.wait_for_result(activity_id, wait))
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        if not waiter.done():
            waiter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiter
    if waiter.cancelled():
        return None
    return waiter.result()


def _add_outcome(body: EnqueueResponse, res: ActivityResult) -> None:
    body.status = res.status
    body.result, corrupt = checked_result(res.data)
    if corrupt is not None:
        body.corrupt = corrupt
    body.error = res.error
