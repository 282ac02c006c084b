"""The worker of the console's browser tests and screenshots, on queue ``console``.

``work`` sleeps ``payload`` seconds (default 0) and returns ``{"slept": s}``;
``fanout`` enqueues ``payload`` ``work`` children; ``flaky`` fails (retryably)
until the file named by its payload exists, creating it as it fails, so with
``max_retries=0`` it is dead-lettered once and completes when retried.

Run as ``runnerq-fast worker tests.browser.console_app:engine --backend URL`` from the repository.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import runnerq_fast as rq

QUEUE = "console"

engine = rq.WorkerEngine(None, queue_name=QUEUE, poll_interval=0.05, ack_flush_interval=0.001, max_workers=4)


@engine.activity("work")
async def work(payload: Any, ctx: rq.ActivityContext) -> dict[str, float]:
    """Sleep ``payload`` seconds (a number; default 0)."""
    seconds = float(payload) if isinstance(payload, int | float) else 0.0
    await asyncio.sleep(seconds)
    return {"slept": seconds}


@engine.activity("fanout")
async def fanout(payload: Any, ctx: rq.ActivityContext) -> dict[str, int]:
    """Enqueue ``payload`` children of type ``work``."""
    n = int(payload or 0)
    for i in range(n):
        await ctx.executor.activity("work").payload(0).metadata({"child": str(i)}).execute()
    return {"children": n}


@engine.activity("flaky")
async def flaky(payload: Any, ctx: rq.ActivityContext) -> str:
    """Fail until the file ``payload`` exists (creating it on the way), then succeed."""
    flag = Path(str(payload))
    if not flag.exists():
        flag.touch()
        raise RuntimeError(f"the first run fails ({flag.name} did not exist yet)")
    return "second time lucky"
