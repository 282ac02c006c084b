"""runnerq-fast: a durable background-activity queue for Python.

>>> import runnerq_fast as rq
>>> backend = await rq.connect("postgresql://localhost/app")
>>> engine = rq.WorkerEngine(backend, queue_name="app")
"""

# First of all: a worker process the supervisor spawned watches it from here on (the imports below take ~0.5 s).
from runnerq_fast import _lifeline  # noqa: F401, I001
from runnerq_fast import speedups, testing
from runnerq_fast.backends import connect
from runnerq_fast.backends.memory import MemoryBackend
from runnerq_fast.config import WorkerConfig, WorkerSettings
from runnerq_fast.engine import (
    ActivityContext,
    ActivityInfo,
    ActivityLogFilter,
    LifecycleHooks,
    WorkerEngine,
    current_activity,
    install_log_context,
)
from runnerq_fast.engine.scheduler import Schedule
from runnerq_fast.errors import (
    ActivityCancelled,
    ActivityFailed,
    BackendError,
    ConfigError,
    CorruptResultError,
    DuplicateActivityError,
    EventLoopMismatchError,
    InvalidActivityError,
    NonRetryableError,
    RetryableError,
    RunnerQError,
    StoreBusyError,
)
from runnerq_fast.executor import ActivityBuilder, ActivityExecutor, ActivityFuture, BlockingBuilder, BlockingExecutor
from runnerq_fast.metrics import LabelledMetricsSink, MetricsSink, NoopMetrics
from runnerq_fast.metrics.prometheus import PrometheusMetrics
from runnerq_fast.models import (
    ActionResult,
    ActivityCount,
    ActivityEvent,
    ActivityFilter,
    ActivityPage,
    ActivityResult,
    ActivitySnapshot,
    ActivityStatus,
    DeadLetterRecord,
    LeaseReport,
    MigrationReport,
    OnDuplicate,
    Priority,
    QueueStats,
    QueueSummary,
    ReadyWork,
    TypeDefaults,
    WorkerInfo,
)
from runnerq_fast.observability import PruneReport, QueueAdmin, QueueInspector, prune
from runnerq_fast.observability.workers import UnhandledType
from runnerq_fast.storage import Backend, register_connector
from runnerq_fast.sync import SyncActivityBuilder, SyncExecutor

register_connector(connect)

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # ``rq.web`` without importing Starlette and prometheus-client with every ``import runnerq_fast``.
    if name == "web":
        import importlib

        return importlib.import_module("runnerq_fast.web")
    raise AttributeError(f"module 'runnerq_fast' has no attribute {name!r}")

__all__ = [
    "ActionResult",
    "ActivityBuilder",
    "ActivityCancelled",
    "ActivityContext",
    "ActivityCount",
    "ActivityEvent",
    "ActivityExecutor",
    "ActivityFailed",
    "ActivityFilter",
    "ActivityFuture",
    "ActivityInfo",
    "ActivityLogFilter",
    "ActivityPage",
    "ActivityResult",
    "ActivitySnapshot",
    "ActivityStatus",
    "Backend",
    "BackendError",
    "BlockingBuilder",
    "BlockingExecutor",
    "ConfigError",
    "CorruptResultError",
    "DeadLetterRecord",
    "DuplicateActivityError",
    "EventLoopMismatchError",
    "InvalidActivityError",
    "LabelledMetricsSink",
    "LeaseReport",
    "LifecycleHooks",
    "MemoryBackend",
    "MetricsSink",
    "MigrationReport",
    "NonRetryableError",
    "NoopMetrics",
    "OnDuplicate",
    "Priority",
    "PrometheusMetrics",
    "PruneReport",
    "QueueAdmin",
    "QueueInspector",
    "QueueStats",
    "QueueSummary",
    "ReadyWork",
    "RetryableError",
    "RunnerQError",
    "Schedule",
    "StoreBusyError",
    "SyncActivityBuilder",
    "SyncExecutor",
    "TypeDefaults",
    "UnhandledType",
    "WorkerConfig",
    "WorkerEngine",
    "WorkerInfo",
    "WorkerSettings",
    "__version__",
    "connect",
    "current_activity",
    "install_log_context",
    "prune",
    "speedups",
    "testing",
]
