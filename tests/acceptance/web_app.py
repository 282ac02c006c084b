"""A worker app for the ``serve`` acceptance tests: ``double`` returns twice its payload, ``refuse`` fails.

Run as ``runnerq-fast worker web_app:engine --backend URL`` from this directory.
"""

from __future__ import annotations

from typing import Any

import runnerq_fast as rq

engine = rq.WorkerEngine(None, queue_name="web", poll_interval=0.05, ack_flush_interval=0.001)


@engine.activity("double")
async def double(payload: Any, ctx: rq.ActivityContext) -> Any:
    """Return ``payload * 2``."""
    return payload * 2


@engine.activity("refuse")
async def refuse(payload: Any, ctx: rq.ActivityContext) -> None:
    """Fail at once (not retried)."""
    raise rq.NonRetryableError(f"refused {payload!r}")
