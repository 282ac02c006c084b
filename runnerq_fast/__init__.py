"""runnerq-fast: a durable background-activity queue for Python.

>>> import runnerq_fast as rq
>>> backend = await rq.connect("postgresql://localhost/app")
>>> engine = rq.WorkerEngine(backend, queue_name="app")
"""

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
    DuplicateActivityError,
    EventLoopMismatchError,
    InvalidActivityError,
    NonRetryableError,
    RetryableError,
    RunnerQError,
)
from runnerq_fast.executor import ActivityBuilder, ActivityExecutor, ActivityFuture
from runnerq_fast.metrics import MetricsSink, NoopMetrics
from runnerq_fast.models import (
    ActivityEvent,
    ActivityResult,
    ActivitySnapshot,
    ActivityStatus,
    DeadLetterRecord,
    OnDuplicate,
    Priority,
    QueueStats,
)
from runnerq_fast.observability import QueueInspector
from runnerq_fast.storage import Backend, register_connector
from runnerq_fast.sync import SyncActivityBuilder, SyncExecutor

register_connector(connect)

__version__ = "0.1.0"

__all__ = [
    "ActivityBuilder",
    "ActivityCancelled",
    "ActivityContext",
    "ActivityEvent",
    "ActivityExecutor",
    "ActivityFailed",
    "ActivityFuture",
    "ActivityInfo",
    "ActivityLogFilter",
    "ActivityResult",
    "ActivitySnapshot",
    "ActivityStatus",
    "Backend",
    "BackendError",
    "ConfigError",
    "DeadLetterRecord",
    "DuplicateActivityError",
    "EventLoopMismatchError",
    "InvalidActivityError",
    "LifecycleHooks",
    "MemoryBackend",
    "MetricsSink",
    "NonRetryableError",
    "NoopMetrics",
    "OnDuplicate",
    "Priority",
    "QueueInspector",
    "QueueStats",
    "RetryableError",
    "RunnerQError",
    "Schedule",
    "SyncActivityBuilder",
    "SyncExecutor",
    "WorkerConfig",
    "WorkerEngine",
    "WorkerSettings",
    "__version__",
    "connect",
    "current_activity",
    "install_log_context",
    "speedups",
    "testing",
]
