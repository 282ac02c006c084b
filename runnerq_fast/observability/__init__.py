"""Views of a queue: :class:`QueueInspector` (read-only), :class:`QueueAdmin` (operator actions), :func:`prune`."""

from runnerq_fast.observability.admin import QueueAdmin
from runnerq_fast.observability.inspector import QueueInspector
from runnerq_fast.observability.retention import FINISHED_STATUSES, PruneReport, prune

__all__ = ["FINISHED_STATUSES", "PruneReport", "QueueAdmin", "QueueInspector", "prune"]
