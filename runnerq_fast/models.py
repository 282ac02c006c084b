"""Data that crosses the boundary between the engine and a backend.

Every structure here is a :class:`msgspec.Struct`; times are integer
milliseconds since the Unix epoch (``*_ms``) unless a name says otherwise.
Payloads, results and metadata travel as already-encoded JSON ``bytes`` so a
backend stores them without re-encoding.
"""

from __future__ import annotations

import enum

import msgspec

__all__ = [
    "TERMINAL_STATUSES",
    "Ack",
    "AckOutcome",
    "ActivityEvent",
    "ActivityResult",
    "ActivitySnapshot",
    "ActivityStatus",
    "ClaimedActivity",
    "DeadLetterRecord",
    "EnqueueOutcome",
    "EnqueueResult",
    "EventType",
    "LeaseRef",
    "NewActivity",
    "OnDuplicate",
    "Priority",
    "QueueStats",
    "ReapReport",
]


class Priority(enum.IntEnum):
    """Dequeue priority; higher runs first (SPEC §3)."""

    LOW = 1
    NORMAL = 2
    HIGH = 3
    CRITICAL = 4


class ActivityStatus(enum.StrEnum):
    """The eight states of an activity (the RunnerQ state diagram plus cancel)."""

    PENDING = "pending"
    SCHEDULED = "scheduled"
    PROCESSING = "processing"
    RETRYING = "retrying"
    COMPLETED = "completed"
    FAILED = "failed"
    DEAD_LETTER = "dead_letter"
    CANCELLED = "cancelled"


TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "dead_letter", "cancelled"})
"""Statuses an activity never leaves."""

READY_STATUSES: frozenset[str] = frozenset({"pending", "scheduled", "retrying"})
"""Statuses a worker may claim once the ready time has come."""


class OnDuplicate(enum.IntEnum):
    """What enqueue does when the idempotency key is already taken.

    The key is scoped by ``(queue, activity_type, key)`` and forgotten after
    ``idempotency_ttl`` seconds.
    """

    ALLOW_REUSE = 1
    """Always create a new activity; the key then points at the new one."""
    RETURN_EXISTING = 2
    """Create nothing; return the activity that holds the key."""
    ALLOW_REUSE_ON_FAILURE = 3
    """Create a new activity only if the holder ended failed, dead_letter or
    cancelled; otherwise return the holder."""
    NO_REUSE = 4
    """Create nothing; raise :class:`~runnerq_fast.errors.DuplicateActivityError`."""


class EventType(enum.StrEnum):
    """Kinds of lifecycle event recorded per activity."""

    ENQUEUED = "enqueued"
    SCHEDULED = "scheduled"
    CLAIMED = "claimed"
    STARTED = "started"
    COMPLETED = "completed"
    RETRYING = "retrying"
    FAILED = "failed"
    DEAD_LETTER = "dead_letter"
    REQUEUED = "requeued"
    LEASE_EXTENDED = "lease_extended"
    CANCELLED = "cancelled"


class NewActivity(msgspec.Struct, frozen=True, gc=False):
    """An activity to enqueue, already validated and encoded.

    Attributes
    ----------
    id : str
        Client-generated UUID (hex, 32 chars) of the activity.
    activity_type : str
        Handler name, 1-255 characters.
    payload : bytes
        The payload as UTF-8 JSON.
    priority : int
        1-4, see :class:`Priority`.
    max_retries : int
        Retries after the first attempt; 0 means never retried.
    timeout_ms : int
        Handler timeout in milliseconds; 0 means none.
    run_at_ms : int
        Earliest start, epoch milliseconds; 0 means now (status ``pending``).
    metadata : bytes
        A JSON object of string keys and values.
    idempotency_key : str or None
        Optional key scoped by (queue, activity_type, key).
    on_duplicate : int
        An :class:`OnDuplicate` value; ignored without a key.
    idempotency_ttl_ms : int
        How long the key is remembered, in milliseconds.
    """

    id: str
    activity_type: str
    payload: bytes
    priority: int = 2
    max_retries: int = 3
    timeout_ms: int = 300_000
    run_at_ms: int = 0
    metadata: bytes = b"{}"
    idempotency_key: str | None = None
    on_duplicate: int = 2
    idempotency_ttl_ms: int = 86_400_000


class EnqueueOutcome(enum.IntEnum):
    """What enqueue did with one :class:`NewActivity`."""

    CREATED = 1
    EXISTING = 2
    REJECTED = 3


class EnqueueResult(msgspec.Struct, frozen=True, gc=False):
    """Outcome of enqueueing one activity.

    ``activity_id`` is the new id when ``outcome`` is CREATED and the id of the
    key's holder when it is EXISTING or REJECTED.
    """

    activity_id: str
    outcome: int


class ClaimedActivity(msgspec.Struct, gc=False):
    """An activity a worker holds a lease on.

    ``claim_token`` identifies this claim; every ack and lease extension must
    present it, so a late ack after the lease was reclaimed is rejected.
    ``payload`` and ``metadata`` are JSON as ``bytes`` or ``str`` (SQL drivers
    hand back text; the codec decodes either).
    """

    id: str
    activity_type: str
    payload: bytes | str
    priority: int
    retry_count: int
    max_retries: int
    timeout_ms: int
    metadata: bytes | str
    claim_token: str
    created_at_ms: int
    ready_at_ms: int


class AckOutcome(enum.IntEnum):
    """The decision the engine made about one finished attempt."""

    COMPLETED = 1
    RETRY = 2
    FAILED = 3
    DEAD_LETTER = 4


class Ack(msgspec.Struct, frozen=True, gc=False):
    """One finished attempt, buffered and flushed in batches.

    Attributes
    ----------
    id, claim_token : str
        The activity and the claim the attempt ran under.
    outcome : int
        An :class:`AckOutcome`.
    result : bytes or None
        JSON-encoded handler return value (COMPLETED only).
    error : str or None
        Error text (RETRY, FAILED, DEAD_LETTER).
    retry_at_ms : int
        When the retry becomes ready, epoch milliseconds (RETRY only).
    """

    id: str
    claim_token: str
    outcome: int
    result: bytes | None = None
    error: str | None = None
    retry_at_ms: int = 0


class LeaseRef(msgspec.Struct, frozen=True, gc=False):
    """An (activity id, claim token) pair naming one held lease."""

    id: str
    claim_token: str


class ReapReport(msgspec.Struct, frozen=True):
    """What one reaper pass did: ids put back to pending and dead-lettered."""

    requeued: list[str]
    dead_lettered: list[str]


class ActivitySnapshot(msgspec.Struct, frozen=True):
    """One activity as stored, for inspection (times in epoch milliseconds)."""

    id: str
    queue: str
    activity_type: str
    status: str
    priority: int
    payload: bytes | str
    metadata: bytes | str
    retry_count: int
    max_retries: int
    timeout_ms: int
    created_at_ms: int
    ready_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    lease_expires_at_ms: int | None
    last_error: str | None
    idempotency_key: str | None


class ActivityEvent(msgspec.Struct, frozen=True):
    """One lifecycle transition; ``id`` increases within a backend and can be
    used to resume a live stream."""

    id: int
    activity_id: str
    queue: str
    event_type: str
    at_ms: int
    detail: str | None = None


class ActivityResult(msgspec.Struct, frozen=True):
    """The stored outcome of a finished activity.

    ``status`` is a terminal :class:`ActivityStatus` value; ``data`` is the
    JSON-encoded return value (completed only); ``error`` the failure text.
    """

    activity_id: str
    status: str
    data: bytes | str | None
    error: str | None


class DeadLetterRecord(msgspec.Struct, frozen=True):
    """A dead-lettered activity and why it ended there."""

    activity: ActivitySnapshot
    error: str | None
    dead_lettered_at_ms: int


class QueueStats(msgspec.Struct, frozen=True):
    """Number of activities in each status for one queue."""

    pending: int = 0
    scheduled: int = 0
    processing: int = 0
    retrying: int = 0
    completed: int = 0
    failed: int = 0
    dead_letter: int = 0
    cancelled: int = 0

    @property
    def total(self) -> int:
        """All activities of the queue, any status."""
        return (
            self.pending
            + self.scheduled
            + self.processing
            + self.retrying
            + self.completed
            + self.failed
            + self.dead_letter
            + self.cancelled
        )
