"""The contract every backend implements.

The engine, executor and inspector only ever talk to a :class:`Backend`; they
never import a concrete backend (import-linter enforces it). Every method that
touches many activities takes them as a batch so a backend can serve it in one
round trip. All times are epoch milliseconds; all durations are milliseconds.

Semantics every backend must honour (SPEC §3, checked by the conformance suite
in ``tests/conformance.py``):

* claim order: ``priority DESC, retry_count DESC, ready_at ASC`` where
  ``ready_at`` is the scheduled time, or the creation time for immediate work;
  only activities of the given types when a type filter is given;
* a claim sets status ``processing``, stamps a fresh ``claim_token`` and a
  lease ``now + lease_ms``;
* an ack or lease extension applies only while the activity is still
  ``processing`` under the same ``claim_token``; otherwise it is rejected;
* an expired lease counts as an attempt: ``retry_count + 1``, then
  ``dead_letter`` when that exceeds ``max_retries``, else back to ``pending``;
* :meth:`Backend.release` puts claimed work back to ``pending`` without
  counting an attempt (graceful shutdown);
* every transition records an event; every terminal transition records a
  result and wakes :meth:`Backend.wait_for_result` callers.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from runnerq_fast.errors import ConfigError
from runnerq_fast.models import (
    Ack,
    ActivityEvent,
    ActivityResult,
    ActivitySnapshot,
    ClaimedActivity,
    DeadLetterRecord,
    EnqueueResult,
    LeaseRef,
    NewActivity,
    QueueStats,
    ReapReport,
)

__all__ = ["Backend", "open_backend", "register_connector"]


class Backend(abc.ABC):
    """Storage for activities, their events and results.

    A backend instance may be shared by an engine, any number of executors
    and inspectors in one event loop. It is opened by
    :func:`runnerq_fast.connect` and closed with :meth:`close`.
    """

    #: URL the backend was opened with (credentials included as given).
    url: str = ""

    #: Scheme name: "memory", "postgresql", "sqlite", "redis".
    name: str = "abstract"

    async def migrate(self) -> None:  # noqa: B027 - optional for backends with no schema
        """Create or upgrade the schema; a no-op for schemaless backends."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections and background tasks. Idempotent."""

    async def __aenter__(self) -> Backend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---------------------------------------------------------------- queueing
    @abc.abstractmethod
    async def enqueue(self, queue: str, items: Sequence[NewActivity]) -> list[EnqueueResult]:
        """Store new activities, applying idempotency atomically.

        Parameters
        ----------
        queue : str
            Queue name.
        items : sequence of NewActivity
            Already validated; stored in one round trip where the store allows.

        Returns
        -------
        list of EnqueueResult
            One per item, same order.
        """

    @abc.abstractmethod
    async def claim(
        self,
        queue: str,
        worker_id: str,
        limit: int,
        activity_types: Sequence[str] | None,
        lease_ms: int,
    ) -> list[ClaimedActivity]:
        """Claim up to ``limit`` ready activities in SPEC order, in one round trip.

        ``activity_types=None`` claims any type. Returned in claim order.
        """

    @abc.abstractmethod
    async def ack(self, queue: str, acks: Sequence[Ack]) -> list[str]:
        """Apply finished attempts in one round trip.

        Returns
        -------
        list of str
            Ids whose ack was rejected because the claim no longer holds.
        """

    @abc.abstractmethod
    async def extend_leases(self, queue: str, leases: Sequence[LeaseRef], lease_ms: int) -> list[str]:
        """Set the lease of every held activity to ``now + lease_ms``.

        Returns
        -------
        list of str
            Ids whose claim no longer holds (their lease was not extended).
        """

    @abc.abstractmethod
    async def release(self, queue: str, leases: Sequence[LeaseRef]) -> list[str]:
        """Put held activities back to ``pending`` without counting an attempt.

        Returns the ids actually released.
        """

    @abc.abstractmethod
    async def requeue_expired(self, queue: str, limit: int) -> ReapReport:
        """Reap up to ``limit`` activities whose lease has expired."""

    @abc.abstractmethod
    async def wait_for_work(self, queue: str, timeout: float) -> None:
        """Return when new work may be ready on ``queue`` or after ``timeout`` seconds.

        A spurious early return is allowed; callers simply try to claim.
        """

    # --------------------------------------------------------------- results
    @abc.abstractmethod
    async def get_result(self, activity_id: str) -> ActivityResult | None:
        """The stored outcome, or ``None`` while the activity is not finished."""

    @abc.abstractmethod
    async def wait_for_result(self, activity_id: str, timeout: float | None) -> ActivityResult | None:
        """Wait (woken by a notification, not a poll) until the activity ends.

        Returns ``None`` if ``timeout`` seconds pass first.
        """

    @abc.abstractmethod
    async def cancel(self, activity_id: str) -> bool:
        """Cancel an activity that has not started (pending, scheduled, retrying).

        Returns ``True`` if it was cancelled.
        """

    # ------------------------------------------------------------ inspection
    @abc.abstractmethod
    async def stats(self, queue: str) -> QueueStats:
        """Count activities of ``queue`` by status."""

    @abc.abstractmethod
    async def list_activities(
        self, queue: str, status: str | None, offset: int = 0, limit: int = 50
    ) -> list[ActivitySnapshot]:
        """Activities of ``queue`` (any status if ``None``), newest first."""

    @abc.abstractmethod
    async def get_activity(self, activity_id: str) -> ActivitySnapshot | None:
        """One activity, or ``None`` if unknown."""

    @abc.abstractmethod
    async def get_events(self, activity_id: str) -> list[ActivityEvent]:
        """The activity's events, oldest first."""

    @abc.abstractmethod
    async def list_dead_letter(self, queue: str, offset: int = 0, limit: int = 50) -> list[DeadLetterRecord]:
        """Dead-lettered activities of ``queue``, newest first."""

    @abc.abstractmethod
    def event_stream(self, queue: str, after_id: int | None = None) -> AsyncIterator[ActivityEvent]:
        """Live events of ``queue``; with ``after_id``, first replays later stored ones."""


_connector: Callable[..., Awaitable[Backend]] | None = None


def register_connector(connector: Callable[..., Awaitable[Backend]]) -> None:
    """Install the function that opens a backend from a URL.

    The package's ``__init__`` installs :func:`runnerq_fast.connect`, so the
    core can accept a URL without importing any backend module.
    """
    global _connector
    _connector = connector


async def open_backend(url: str, **options: object) -> Backend:
    """Open ``url`` through the registered connector (``options`` go to the backend's ``open``).

    Raises
    ------
    ConfigError
        If no connector is registered (``runnerq_fast`` was not imported).
    """
    if _connector is None:
        raise ConfigError("no backend connector registered; import runnerq_fast first")
    return await _connector(url, **options)
