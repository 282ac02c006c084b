"""The worker engine and what handlers see."""

from runnerq_fast.engine.context import ActivityContext
from runnerq_fast.engine.engine import Handler, WorkerEngine, run_with_uvloop
from runnerq_fast.engine.hooks import ActivityInfo, LifecycleHooks
from runnerq_fast.engine.logcontext import ActivityLogFilter, current_activity, install_log_context

__all__ = [
    "ActivityContext",
    "ActivityInfo",
    "ActivityLogFilter",
    "Handler",
    "LifecycleHooks",
    "WorkerEngine",
    "current_activity",
    "install_log_context",
    "run_with_uvloop",
]
