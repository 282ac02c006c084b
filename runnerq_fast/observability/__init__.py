"""Read-only views of a queue: :class:`QueueInspector`."""

from runnerq_fast.observability.inspector import QueueInspector

__all__ = ["QueueInspector"]
