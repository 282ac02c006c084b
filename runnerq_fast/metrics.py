"""Metric names and the :class:`MetricsSink` protocol (no-op by default)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = [
    "ACKS_REJECTED",
    "ACTIVITIES_CLAIMED",
    "ACTIVITIES_COMPLETED",
    "ACTIVITIES_DEAD_LETTERED",
    "ACTIVITIES_FAILED",
    "ACTIVITIES_REAPED",
    "ACTIVITIES_RETRIED",
    "ACTIVITY_DURATION",
    "BACKEND_ERRORS",
    "MetricsSink",
    "NoopMetrics",
]

ACTIVITIES_CLAIMED = "runnerq_activities_claimed_total"
ACTIVITIES_COMPLETED = "runnerq_activities_completed_total"
ACTIVITIES_RETRIED = "runnerq_activities_retried_total"
ACTIVITIES_FAILED = "runnerq_activities_failed_total"
ACTIVITIES_DEAD_LETTERED = "runnerq_activities_dead_lettered_total"
ACTIVITIES_REAPED = "runnerq_activities_reaped_total"
ACKS_REJECTED = "runnerq_acks_rejected_total"
BACKEND_ERRORS = "runnerq_backend_errors_total"
ACTIVITY_DURATION = "runnerq_activity_duration_seconds"


@runtime_checkable
class MetricsSink(Protocol):
    """Where the engine reports counters and durations.

    Implementations must be cheap and must not raise; they are called on the
    hot path, once per activity.
    """

    def inc_counter(self, name: str, value: int = 1) -> None:
        """Add ``value`` to counter ``name``."""

    def observe_duration(self, name: str, seconds: float) -> None:
        """Record one duration of ``name``, in seconds."""


class NoopMetrics:
    """A sink that records nothing (the default); the engine skips it entirely."""

    def inc_counter(self, name: str, value: int = 1) -> None:
        """Do nothing."""

    def observe_duration(self, name: str, seconds: float) -> None:
        """Do nothing."""
