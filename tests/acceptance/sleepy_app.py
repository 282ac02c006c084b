"""A worker app for the lease test: the first attempt of ``nap`` hangs.

Run as ``runnerq-fast worker sleepy_app:engine`` from this directory. The
first attempt sleeps ``payload["seconds"]`` (so the test can SIGKILL the worker
mid-activity); any later attempt returns at once, reporting its attempt and pid.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import runnerq_fast as rq

engine = rq.WorkerEngine(None, queue_name="sleepy")


@engine.activity("nap")
async def nap(payload: Any, ctx: rq.ActivityContext) -> dict[str, int]:
    """Sleep on the first attempt, return ``{"retry_count", "pid"}`` on any other."""
    if ctx.retry_count == 0:
        await asyncio.sleep(float(payload["seconds"]))
    return {"retry_count": ctx.retry_count, "pid": os.getpid()}
