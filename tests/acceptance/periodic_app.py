"""A worker app for the schedule test: ``beat`` every second.

Run as ``runnerq-fast worker periodic_app:engine --queue Q`` from this
directory, in as many processes as wanted: together they enqueue exactly one
``beat`` per tick. Each run returns the pid that ran it.
"""

from __future__ import annotations

import os
from typing import Any

import runnerq_fast as rq

engine = rq.WorkerEngine(None, queue_name="periodic")
engine.periodic(1, "beat", payload={"hello": "tick"})


@engine.activity("beat")
async def beat(payload: Any, ctx: rq.ActivityContext) -> dict[str, Any]:
    """Return the pid and the tick this activity stands for."""
    return {"pid": os.getpid(), "tick": ctx.metadata["tick"]}
