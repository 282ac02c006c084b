"""``GET /healthz`` (the process is up) and ``GET /readyz`` (the backend answers)."""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import Request
from starlette.responses import Response

from runnerq_fast.web.context import WebContext
from runnerq_fast.web.responses import JsonResponse, problem_response
from runnerq_fast.web.wire import Health

__all__ = ["READY_TIMEOUT", "HealthRoutes"]

log = logging.getLogger("runnerq_fast.web")

READY_TIMEOUT = 2.0
"""Seconds the backend gets to answer a readiness probe."""

_PROBE_ID = "0" * 32  # no activity has this id: a point lookup on the primary key, on every backend


class HealthRoutes:
    """Liveness and readiness of one app."""

    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    async def healthz(self, request: Request) -> Response:
        """Always 200 while the process serves requests."""
        return JsonResponse(Health("ok"))

    async def readyz(self, request: Request) -> Response:
        """200 when the backend answers a point lookup within :data:`READY_TIMEOUT`, else 503."""
        try:
            backend = await asyncio.wait_for(self.ctx.open(), READY_TIMEOUT)
            await asyncio.wait_for(backend.get_activity(_PROBE_ID), READY_TIMEOUT)
        except Exception as exc:
            text = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
            log.warning("readiness probe failed: %s", text)
            return problem_response(503, f"the backend does not answer: {text}", headers={"Retry-After": "1"})
        return JsonResponse(Health("ok", backend.name))
