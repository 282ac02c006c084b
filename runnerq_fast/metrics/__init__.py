"""Metric names, their labels, and the :class:`MetricsSink` protocol (no-op by default).

The engine reports to a sink through labelled calls,
:meth:`LabelledMetricsSink.count`, :meth:`~LabelledMetricsSink.observe` and
:meth:`~LabelledMetricsSink.observe_many` (durations of a batch of claims or
completions at once), whose ``labels`` tuple holds the values of
the names :data:`LABELS` lists for that metric, in that order: ``queue`` and
``activity_type``, plus ``outcome`` where it applies, and nothing unbounded.
The engine skips the sink entirely when it is :class:`NoopMetrics` (the
default), so metrics cost nothing when off.

:class:`~runnerq_fast.metrics.prometheus.PrometheusMetrics` is the
Prometheus sink. A sink written for RunnerQ's two-method trait
(``inc_counter`` / ``observe_duration`` only) still works: :func:`labelled`
wraps it and drops the labels (and, as before, reports run durations of
completed attempts only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

__all__ = [
    "ACKS_REJECTED",
    "ACTIVITIES_CLAIMED",
    "ACTIVITIES_COMPLETED",
    "ACTIVITIES_DEAD_LETTERED",
    "ACTIVITIES_ENQUEUED",
    "ACTIVITIES_FAILED",
    "ACTIVITIES_REAPED",
    "ACTIVITIES_RETRIED",
    "ACTIVITY_DURATION",
    "BACKEND_ERRORS",
    "COUNTERS",
    "HELP",
    "HISTOGRAMS",
    "LABELS",
    "QUEUE_WAIT",
    "LabelledMetricsSink",
    "MetricsSink",
    "NoopMetrics",
    "labelled",
]

ACTIVITIES_ENQUEUED = "runnerq_activities_enqueued_total"
ACTIVITIES_CLAIMED = "runnerq_activities_claimed_total"
ACTIVITIES_COMPLETED = "runnerq_activities_completed_total"
ACTIVITIES_RETRIED = "runnerq_activities_retried_total"
ACTIVITIES_FAILED = "runnerq_activities_failed_total"
ACTIVITIES_DEAD_LETTERED = "runnerq_activities_dead_lettered_total"
ACTIVITIES_REAPED = "runnerq_activities_reaped_total"
ACKS_REJECTED = "runnerq_acks_rejected_total"
BACKEND_ERRORS = "runnerq_backend_errors_total"
ACTIVITY_DURATION = "runnerq_activity_duration_seconds"
QUEUE_WAIT = "runnerq_queue_wait_seconds"

_QT = ("queue", "activity_type")

LABELS: dict[str, tuple[str, ...]] = {
    ACTIVITIES_ENQUEUED: _QT,
    ACTIVITIES_CLAIMED: _QT,
    ACTIVITIES_COMPLETED: _QT,
    ACTIVITIES_RETRIED: _QT,
    ACTIVITIES_FAILED: _QT,
    ACTIVITIES_DEAD_LETTERED: _QT,
    ACTIVITIES_REAPED: ("queue", "outcome"),
    ACKS_REJECTED: ("queue",),
    BACKEND_ERRORS: ("queue",),
    ACTIVITY_DURATION: ("queue", "activity_type", "outcome"),
    QUEUE_WAIT: _QT,
}
"""Label names of each metric, in the order of the ``labels`` tuple the engine passes.

``outcome`` is ``completed``, ``retry``, ``failed`` or ``dead_letter`` for the
run duration, and ``requeued`` or ``dead_letter`` for reaped activities (a
reaped activity's type is not known to the reaper).
"""

COUNTERS = (
    ACTIVITIES_ENQUEUED,
    ACTIVITIES_CLAIMED,
    ACTIVITIES_COMPLETED,
    ACTIVITIES_RETRIED,
    ACTIVITIES_FAILED,
    ACTIVITIES_DEAD_LETTERED,
    ACTIVITIES_REAPED,
    ACKS_REJECTED,
    BACKEND_ERRORS,
)
"""Every counter the engine and the web app report."""

HISTOGRAMS = (ACTIVITY_DURATION, QUEUE_WAIT)
"""Every histogram (durations in seconds)."""

HELP: dict[str, str] = {
    ACTIVITIES_ENQUEUED: "Activities stored by enqueue.",
    ACTIVITIES_CLAIMED: "Activities claimed by a worker.",
    ACTIVITIES_COMPLETED: "Activities that completed.",
    ACTIVITIES_RETRIED: "Failed attempts scheduled for a retry.",
    ACTIVITIES_FAILED: "Activities that failed for good (non-retryable error).",
    ACTIVITIES_DEAD_LETTERED: "Activities moved to the dead letter after their last retry.",
    ACTIVITIES_REAPED: "Activities whose lease expired, taken back by the reaper.",
    ACKS_REJECTED: "Acks the store refused because the claim no longer held.",
    BACKEND_ERRORS: "Backend calls of the engine that raised.",
    ACTIVITY_DURATION: "Handler run time of one attempt, by outcome.",
    QUEUE_WAIT: "Time from when an activity was ready (enqueue, or its scheduled or retry time) to its start.",
}
"""One line of help per metric."""


@runtime_checkable
class MetricsSink(Protocol):
    """Where the engine reports counters and durations (RunnerQ's trait).

    Implementations must be cheap and must not raise; they are called on the
    hot path, once per activity.
    """

    def inc_counter(self, name: str, value: int = 1) -> None:
        """Add ``value`` to counter ``name``."""

    def observe_duration(self, name: str, seconds: float) -> None:
        """Record one duration of ``name``, in seconds."""


@runtime_checkable
class LabelledMetricsSink(MetricsSink, Protocol):
    """A sink that also takes the label values of :data:`LABELS`."""

    def count(self, name: str, labels: tuple[str, ...], value: int = 1) -> None:
        """Add ``value`` to counter ``name`` at ``labels`` (values in :data:`LABELS` order)."""

    def observe(self, name: str, labels: tuple[str, ...], seconds: float) -> None:
        """Record one duration of histogram ``name`` at ``labels``, in seconds."""

    def observe_many(self, name: str, labels: tuple[str, ...], seconds: Sequence[float]) -> None:
        """Record several durations (seconds) of histogram ``name`` at ``labels`` (the engine's batched call)."""


class NoopMetrics:
    """A sink that records nothing (the default); the engine skips it entirely."""

    def inc_counter(self, name: str, value: int = 1) -> None:
        """Do nothing."""

    def observe_duration(self, name: str, seconds: float) -> None:
        """Do nothing."""

    def count(self, name: str, labels: tuple[str, ...], value: int = 1) -> None:
        """Do nothing."""

    def observe(self, name: str, labels: tuple[str, ...], seconds: float) -> None:
        """Do nothing."""

    def observe_many(self, name: str, labels: tuple[str, ...], seconds: Sequence[float]) -> None:
        """Do nothing."""


class _Unlabelled:
    """Adapts a two-method sink: labelled calls lose their labels."""

    __slots__ = ("inc_counter", "observe_duration", "sink")

    def __init__(self, sink: MetricsSink) -> None:
        self.sink = sink
        self.inc_counter = sink.inc_counter
        self.observe_duration = sink.observe_duration

    def count(self, name: str, labels: tuple[str, ...], value: int = 1) -> None:
        self.sink.inc_counter(name, value)

    def observe(self, name: str, labels: tuple[str, ...], seconds: float) -> None:
        # a two-method sink keeps seeing what it always saw: run times of completed attempts only
        if name == ACTIVITY_DURATION and labels[-1:] != ("completed",):
            return
        self.sink.observe_duration(name, seconds)

    def observe_many(self, name: str, labels: tuple[str, ...], seconds: Sequence[float]) -> None:
        for one in seconds:
            self.observe(name, labels, one)


def labelled(sink: MetricsSink) -> LabelledMetricsSink:
    """``sink`` itself if it takes labels, else a wrapper that drops them.

    Raises
    ------
    TypeError
        If ``sink`` has neither ``count``/``observe`` nor ``inc_counter``/``observe_duration``.
    """
    if isinstance(sink, LabelledMetricsSink):
        return sink
    if not isinstance(sink, MetricsSink):
        raise TypeError(f"a metrics sink needs inc_counter() and observe_duration(); got {type(sink).__name__}")
    return _Unlabelled(sink)
