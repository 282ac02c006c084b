"""A worker app whose handler logs: ``runnerq-fast worker tests.acceptance.logging_app:engine``."""

from __future__ import annotations

import logging
from typing import Any

import runnerq_fast as rq

engine = rq.WorkerEngine(None, queue_name="chatty")
log = logging.getLogger("chatty.app")


@engine.activity("chat")
def chat(payload: Any, ctx: rq.ActivityContext) -> None:
    """Log one warning (from the thread pool: a plain ``def``), fail the first attempt."""
    log.warning("hello %s", payload)
    if ctx.retry_count == 0:
        raise RuntimeError("first attempt fails")
