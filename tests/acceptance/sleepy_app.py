"""A worker app for the lease test: the first attempt of ``nap`` hangs.

Run as ``runnerq-fast worker sleepy_app:engine`` from this directory. The
first run sleeps ``payload["seconds"]`` (so the test can SIGKILL the worker
mid-activity); any later run returns at once, reporting its attempt and pid.
A run is the first while ``retry_count`` is 0, or, when the payload names a
``marker`` file, while that file does not exist (the first run creates it): an
expired lease of an ordinary claim is not counted, so the run after a SIGKILL
has ``retry_count`` 0 too.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import runnerq_fast as rq

engine = rq.WorkerEngine(None, queue_name="sleepy")


@engine.activity("nap")
async def nap(payload: Any, ctx: rq.ActivityContext) -> dict[str, int]:
    """Sleep on the first run, return ``{"retry_count", "pid"}`` on any other."""
    marker = payload.get("marker")
    if marker is not None:
        first = not Path(marker).exists()
        Path(marker).touch()
    else:
        first = ctx.retry_count == 0
    if first:
        await asyncio.sleep(float(payload["seconds"]))
    return {"retry_count": ctx.retry_count, "pid": os.getpid()}
