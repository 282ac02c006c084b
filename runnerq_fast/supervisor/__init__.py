"""A supervised multi-process worker: ``runnerq-fast worker MODULE:ENGINE --processes N``.

The supervisor runs no event loop. It starts N worker processes with the
``spawn`` start method (never ``fork``, so no child inherits a running event
loop, a connection pool or a lock), restarts a crashed one with exponential
backoff, gives up after a crash loop, recycles a child gracefully after a
number of activities or above a resident memory size (its replacement is
started first), forwards the first SIGTERM/SIGINT to every child once and
kills them all on a second one. Prometheus metrics written by the children in
prometheus-client's multiprocess mode are aggregated in one directory.

* :mod:`~runnerq_fast.supervisor.policy`: restart backoff and crash-loop detection
* :mod:`~runnerq_fast.supervisor.child`: what runs in a child, and what it shares with the supervisor
* :mod:`~runnerq_fast.supervisor.pool`: the supervisor's loop (start, watch, restart, recycle, stop)
* :mod:`~runnerq_fast.supervisor.metrics`: the multiprocess metrics directory and its ``/metrics`` endpoint

Only the CLI imports this package; it never imports the CLI: the CLI hands it
the function each child runs (picklable by name, so ``spawn`` can send it).
"""

from runnerq_fast.supervisor.child import ChildLink, rss_bytes, serve_child
from runnerq_fast.supervisor.policy import RestartPolicy
from runnerq_fast.supervisor.pool import Supervisor, SupervisorConfig, SupervisorResult

__all__ = [
    "ChildLink",
    "RestartPolicy",
    "Supervisor",
    "SupervisorConfig",
    "SupervisorResult",
    "rss_bytes",
    "serve_child",
]
