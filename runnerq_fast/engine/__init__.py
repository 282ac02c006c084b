"""The worker engine and what handlers see."""

from runnerq_fast.engine.context import ActivityContext
from runnerq_fast.engine.engine import Handler, WorkerEngine, run_with_uvloop
from runnerq_fast.engine.hooks import LifecycleHooks

__all__ = ["ActivityContext", "Handler", "LifecycleHooks", "WorkerEngine", "run_with_uvloop"]
