"""The app ``benchmarks/processes.py`` runs: one no-op activity type, default engine configuration.

``runnerq-fast worker benchmarks.noop_app:engine --backend URL --queue Q --processes N``
(from the repository root).
"""

from __future__ import annotations

from typing import Any

import runnerq_fast as rq

engine = rq.WorkerEngine(None, queue_name="procbench")


@engine.activity("noop")
async def noop(payload: Any, ctx: rq.ActivityContext) -> None:
    """Do nothing."""
