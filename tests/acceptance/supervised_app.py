"""A worker app for the supervisor tests: ``runnerq-fast worker supervised_app:engine --processes N``.

Run from this directory. ``record`` appends its activity id to
``<payload["dir"]>/<pid>.ran`` (so a test sees which process ran what, and
that nothing ran twice), counts itself in a prometheus-client Counter (in the
multiprocess directory the supervisor sets up), sleeps ``payload["sleep"]``
seconds if given and returns ``{"pid": <pid>}``.

With ``SUPERVISED_APP_IMPORT_GATE=<dir>`` in the environment, a worker
process (not the supervisor, which imports the app first) creates
``<dir>/<pid>.importing`` and blocks its import of this module until
``<dir>/open`` exists: a slow import whose moment a test knows.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

from prometheus_client import Counter

import runnerq_fast as rq

engine = rq.WorkerEngine(None, queue_name="supervised", max_workers=8)

RECORDS = Counter("supervised_app_records", "Activities run by the supervised test app.")


@engine.activity("record")
async def record(payload: Any, ctx: rq.ActivityContext) -> dict[str, int]:
    """Record which process ran this activity, then sleep ``payload.get("sleep", 0)`` seconds."""
    pid = os.getpid()
    with (Path(payload["dir"]) / f"{pid}.ran").open("a") as fh:
        fh.write(ctx.activity_id + "\n")
    RECORDS.inc()
    if payload.get("sleep"):
        await asyncio.sleep(float(payload["sleep"]))
    return {"pid": pid}


_GATE = os.environ.get("SUPERVISED_APP_IMPORT_GATE")
if _GATE and multiprocessing.parent_process() is not None:
    (Path(_GATE) / f"{os.getpid()}.importing").touch()
    while not (Path(_GATE) / "open").exists():
        time.sleep(0.01)
