"""The HTTP service: one ASGI app on Starlette (:func:`create_app`), served by ``runnerq-fast serve``.

Routes: the enqueue API (``/api/v1/queues/{queue}/activities``, batch,
``Idempotency-Key``, ``?wait=``), RunnerQ's observability routes
(``/api/observability/...``) with a resumable SSE stream, ``/metrics``,
``/healthz``, ``/readyz`` and ``/api/openapi.json``. Modules:

* :mod:`.app` — :func:`create_app`, the lifespan and the route table;
* :mod:`.context` — what one app owns (backend, queues, buffers, settings);
* :mod:`.wire` — request/response Structs and the problem body;
* :mod:`.responses` — JSON and problem responses, capped bodies;
* :mod:`.enqueue` and :mod:`.buffer` — the enqueue routes and the coalescing buffer;
* :mod:`.observability` and :mod:`.stream` — RunnerQ's read routes and SSE;
* :mod:`.metrics`, :mod:`.health`, :mod:`.auth`, :mod:`.openapi`.
"""

from runnerq_fast.web.app import RunnerQApp, create_app
from runnerq_fast.web.context import WebLimits

__all__ = ["RunnerQApp", "WebLimits", "create_app"]
