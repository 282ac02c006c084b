"""Views of a queue: :class:`QueueInspector` (read-only) and :class:`QueueAdmin` (operator actions)."""

from runnerq_fast.observability.admin import QueueAdmin
from runnerq_fast.observability.inspector import QueueInspector

__all__ = ["QueueAdmin", "QueueInspector"]
