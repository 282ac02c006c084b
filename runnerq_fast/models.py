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
    "LEASE_EXPIRED_UNCHARGED",
    "TERMINAL_STATUSES",
    "Ack",
    "AckOutcome",
    "ActionResult",
    "ActivityCount",
    "ActivityEvent",
    "ActivityFilter",
    "ActivityPage",
    "ActivityResult",
    "ActivitySnapshot",
    "ActivityStatus",
    "ClaimedActivity",
    "DeadLetterRecord",
    "EnqueueOutcome",
    "EnqueueResult",
    "EventType",
    "LeaseRef",
    "LeaseReport",
    "MigrationReport",
    "NewActivity",
    "OnDuplicate",
    "Priority",
    "ProgressUpdate",
    "QueueStats",
    "QueueSummary",
    "ReadyWork",
    "ReapReport",
    "TypeDefaults",
    "WorkerInfo",
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

LEASE_EXPIRED_UNCHARGED = "lease expired beside other activities; not counted, it runs alone next"
"""The last error (and ``requeued`` event detail) of an expired lease the reaper did not count:
the activity was claimed with others, so it may have merely shared the worker that died. Every
backend stores this text (the SQL and Lua reapers take it as a parameter)."""


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
    RETRY_REQUESTED = "retry_requested"
    """An operator put a failed, dead-lettered or cancelled activity back to pending (detail: the old status)."""
    CANCEL_REQUESTED = "cancel_requested"
    """An operator asked to cancel a running activity; ``cancelled`` follows once its engine stops the handler."""
    RUN_NOW = "run_now"
    """An operator made a scheduled or retrying activity ready now (detail: the old status)."""
    PRIORITY_CHANGED = "priority_changed"
    """An operator changed the priority of an activity that has not started (detail: ``"old->new"``)."""
    DELETED = "deleted"
    """A finished activity was deleted with its events; seen on the live stream only."""
    PROGRESS = "progress"
    """A running handler reported progress (``ctx.set_progress``; detail: the value as JSON text)."""


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
    parent_id : str or None
        The activity whose handler enqueued this one (``ctx.executor``), if any.
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
    parent_id: str | None = None


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
    CANCELLED = 5
    """An operator cancelled the running activity and its handler was stopped."""


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
        Error text (RETRY, FAILED, DEAD_LETTER; ignored for CANCELLED).
    retry_at_ms : int
        When the retry becomes ready, epoch milliseconds (RETRY only).
    traceback : str or None
        The traceback of what the handler raised (RETRY, FAILED, DEAD_LETTER;
        see :func:`~runnerq_fast.engine.errtext.format_traceback`); ``None``
        when no handler raised (a completion, an unknown type, a payload that
        does not decode). The store keeps it as the activity's
        :attr:`ActivitySnapshot.traceback`.
    """

    id: str
    claim_token: str
    outcome: int
    result: bytes | None = None
    error: str | None = None
    retry_at_ms: int = 0
    traceback: str | None = None


class LeaseRef(msgspec.Struct, frozen=True, gc=False):
    """An (activity id, claim token) pair naming one held lease."""

    id: str
    claim_token: str


class ProgressUpdate(msgspec.Struct, frozen=True, gc=False):
    """The latest progress of one held activity, written under its claim
    (:meth:`~runnerq_fast.storage.Backend.set_progress`)."""

    id: str
    claim_token: str
    progress: str
    """JSON text (:func:`runnerq_fast.progress.encode_progress`)."""


class LeaseReport(msgspec.Struct, frozen=True):
    """What one heartbeat (:meth:`~runnerq_fast.storage.Backend.extend_leases`) found.

    Attributes
    ----------
    lost : list of str
        Ids whose claim no longer holds (their lease was not extended).
    cancel_requested : list of str
        Ids still held (their lease was extended) that an operator asked to
        cancel: the engine stops their handlers and acknowledges them
        :attr:`AckOutcome.CANCELLED`.
    """

    lost: list[str]
    cancel_requested: list[str] = msgspec.field(default_factory=list)


class ReapReport(msgspec.Struct, frozen=True):
    """What one reaper pass did: ids put back to pending, dead-lettered, and
    cancelled (their cancellation had been requested)."""

    requeued: list[str]
    dead_lettered: list[str]
    cancelled: list[str] = msgspec.field(default_factory=list)


class ActivitySnapshot(msgspec.Struct, frozen=True):
    """One activity as stored, for inspection (times in epoch milliseconds)."""

    id: str
    queue: str
    activity_type: str
    status: str
    priority: int
    payload: bytes | str
    metadata: dict[str, str]
    """String metadata (``{"tenant": "t1"}``), decoded from the store; ``{}`` when it has none (or when the
    stored text does not decode: then ``corrupt`` says so). A new dict per snapshot."""
    retry_count: int
    """Retries taken: attempts that failed and were tried again. Its current (or last) attempt is number
    ``retry_count + 1``, out of at most ``max_retries + 1``; a dead-lettered activity shows
    ``retry_count == max_retries`` on every backend, whether its handler failed or its lease expired."""
    max_retries: int
    timeout_ms: int
    created_at_ms: int
    ready_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    lease_expires_at_ms: int | None
    last_error: str | None
    idempotency_key: str | None
    parent_id: str | None = None
    """The activity whose handler enqueued this one through ``ctx.executor``, if any."""
    corrupt: str | None = None
    """Why the stored row cannot be decoded (``"corrupt row: priority is 'high', not an integer"``), else
    ``None``. A corrupt row's undecodable fields show placeholders (``0``, ``None``, text with replacement
    characters); a claim or the reaper dead-letters it with this reason as its last error."""
    traceback: str | None = None
    """The traceback of the last attempt whose handler raised (bounded, from the handler's frame down), kept
    after a later retry, lease expiry or operator action until another attempt raises; ``None`` when no
    handler of it ever raised. Filled by :meth:`~runnerq_fast.storage.Backend.get_activity` only: listings
    leave it ``None`` (a page of rows would carry up to 16,000 characters each)."""
    progress: str | None = None
    """The last progress a handler reported (``ctx.set_progress``), as JSON text: a fraction from 0 to 1
    (``"0.25"``) or an object; ``None`` if none was. Kept after the attempt ends, and across a retry until
    the next attempt reports its own. Set by :meth:`~runnerq_fast.storage.Backend.get_activity` only
    (listings leave it ``None``); :func:`runnerq_fast.progress.decode_progress` gives its value."""


class ActivityEvent(msgspec.Struct, frozen=True, gc=False):
    """One lifecycle transition; ``id`` increases within a backend and can be
    used to resume a live stream.

    ``traceback`` is that of the attempt whose failure the event records
    (``retrying``, ``failed`` or ``dead_letter`` written by the ack of an
    attempt whose handler raised; at most 16,000 characters), else ``None``.
    :meth:`Backend.get_events` returns it; the live stream
    (:meth:`Backend.event_stream`) leaves it out.
    """

    id: int
    activity_id: str
    queue: str
    event_type: str
    at_ms: int
    detail: str | None = None
    traceback: str | None = None


class ActivityResult(msgspec.Struct, frozen=True, gc=False):
    """The stored outcome of a finished activity.

    ``status`` is a terminal :class:`ActivityStatus` value; ``data`` is the
    JSON-encoded return value (completed only); ``error`` the failure text;
    ``traceback`` (failed and dead_letter only) that of the last attempt whose
    handler raised, as :attr:`ActivitySnapshot.traceback`.
    """

    activity_id: str
    status: str
    data: bytes | str | None
    error: str | None
    traceback: str | None = None


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


class QueueSummary(msgspec.Struct, frozen=True):
    """One queue at a glance (:meth:`~runnerq_fast.storage.Backend.list_queues`).

    Attributes
    ----------
    queue : str
        The queue's name.
    counts : QueueStats
        Activities by status.
    by_type : dict of str to dict of str to int
        ``activity_type -> {status: count}``; zero counts are omitted.
    oldest_ready_ms : int or None
        Ready time (epoch ms) of the oldest activity a worker could claim now
        (pending, or scheduled/retrying and due), or ``None`` if there is none.
    """

    queue: str
    counts: QueueStats
    by_type: dict[str, dict[str, int]]
    oldest_ready_ms: int | None


class ActivityFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which activities of a queue a listing, count or action applies to.

    Every given field must match (AND); within a tuple any value matches (OR).
    ``None`` (or an empty ``metadata``) means "no condition". Validated by
    every backend (:func:`runnerq_fast.filters.check_filter`); a bad value is
    an :class:`~runnerq_fast.errors.InvalidActivityError`.

    Attributes
    ----------
    ids : tuple of str or None
        Exact activity ids (at most :data:`runnerq_fast.filters.MAX_IDS`).
    statuses : tuple of str or None
        :class:`ActivityStatus` values.
    activity_types : tuple of str or None
        Activity types.
    priorities : tuple of int or None
        Priorities, 1-4.
    created_after_ms : int or None
        Created at or after this time (inclusive), epoch ms.
    created_before_ms : int or None
        Created before this time (exclusive), epoch ms.
    metadata : tuple of (str, str) pairs
        Every ``key=value`` pair must be in the activity's metadata.
    parent_id : str or None
        Only children of this activity.
    """

    ids: tuple[str, ...] | None = None
    statuses: tuple[str, ...] | None = None
    activity_types: tuple[str, ...] | None = None
    priorities: tuple[int, ...] | None = None
    created_after_ms: int | None = None
    created_before_ms: int | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    parent_id: str | None = None


class ActivityPage(msgspec.Struct, frozen=True):
    """One page of a keyset-paged listing.

    Attributes
    ----------
    items : list of ActivitySnapshot
        At most the requested limit, in the listing's order. A page may hold
        fewer items (even none) and still have a ``next_cursor``: a filter on
        priority or metadata examines a bounded number of rows per page.
    next_cursor : str or None
        Opaque; pass it back for the next page. ``None``: there is no more.
    """

    items: list[ActivitySnapshot]
    next_cursor: str | None


class ActivityCount(msgspec.Struct, frozen=True):
    """How many activities match a filter (:meth:`~runnerq_fast.storage.Backend.count_activities`).

    Attributes
    ----------
    count : int
        Matching activities found, at most the ``cap`` asked for.
    exact : bool
        ``True`` if ``count`` is the exact number; ``False`` if counting
        stopped at the cap, so at least ``count`` match.
    """

    count: int
    exact: bool


class ActionResult(msgspec.Struct, frozen=True):
    """What one operator action did.

    Attributes
    ----------
    action : str
        ``"retry"``, ``"cancel"``, ``"run_now"``, ``"set_priority"`` or ``"delete"``.
    changed : list of str
        Ids the action changed (for ``cancel`` this includes running
        activities whose cancellation was requested).
    skipped : int
        Activities the filter matched that were not in a state the action
        applies to (counted up to the action's ``limit``).
    """

    action: str
    changed: list[str]
    skipped: int


class MigrationReport(msgspec.Struct, frozen=True, kw_only=True):
    """What one :meth:`~runnerq_fast.storage.Backend.migrate` call found and did.

    Attributes
    ----------
    applied : tuple of int
        Migration versions this call applied, in order; empty when the store
        was already up to date.
    latest : int or None
        The highest migration version this runnerq-fast release ships;
        ``None`` for a store without numbered migrations.
    unknown : tuple of int
        Versions the store records that this release does not ship, in
        order: a newer runnerq-fast migrated the store (see :attr:`warning`).
        The store is opened and used all the same.
    """

    applied: tuple[int, ...] = ()
    latest: int | None = None
    unknown: tuple[int, ...] = ()

    @property
    def warning(self) -> str | None:
        """The warning :attr:`unknown` deserves, as one sentence; ``None`` when it is empty."""
        if not self.unknown:
            return None
        versions = ", ".join(f"{v:04d}" for v in self.unknown)
        plural = "s" if len(self.unknown) > 1 else ""
        knows = "no migration" if self.latest is None else f"migrations up to {self.latest:04d}"
        return (
            f"the store holds migration{plural} {versions}, unknown to this runnerq-fast release (it knows "
            f"{knows}): a newer runnerq-fast migrated it, and this release may not read or write it "
            f"correctly; upgrade runnerq-fast, or roll back only to releases that know {versions}"
        )


class WorkerInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One running engine as the worker registry holds it (:meth:`~runnerq_fast.storage.Backend.register_worker`).

    Attributes
    ----------
    worker_id : str
        The engine's id (the name it claims under).
    queue : str
        The queue it serves.
    host : str
        Host name of its process.
    pid : int
        Process id.
    activity_types : tuple of str
        The types it claims; ``("*",)`` when it claims any type.
    in_flight : int
        Activities it held (claimed, not yet acknowledged) at its last heartbeat.
    concurrency : int
        Its worker slots (``max_workers``).
    started_at_ms : int
        When it started, epoch ms.
    last_seen_ms : int
        Its last heartbeat, epoch ms (the engine's clock).
    """

    worker_id: str
    queue: str
    host: str
    pid: int
    activity_types: tuple[str, ...]
    in_flight: int
    concurrency: int
    started_at_ms: int
    last_seen_ms: int


class TypeDefaults(msgspec.Struct, frozen=True, kw_only=True):
    """The enqueue defaults of one activity type, as a worker recorded them.

    See :meth:`~runnerq_fast.storage.Backend.set_type_defaults`.

    A field left ``None`` is not set by the type: an enqueue that does not set
    it either gets the producer's engine-wide default
    (:class:`~runnerq_fast.config.WorkerConfig`).

    Attributes
    ----------
    activity_type : str
        The type.
    max_retries : int or None
        Retries after the first attempt.
    timeout_ms : int or None
        Handler timeout, milliseconds (0 = none).
    priority : int or None
        1 (LOW) to 4 (CRITICAL).
    """

    activity_type: str
    max_retries: int | None = None
    timeout_ms: int | None = None
    priority: int | None = None


class ReadyWork(msgspec.Struct, frozen=True):
    """Activities of one queue a worker could claim now (:meth:`~runnerq_fast.storage.Backend.ready_work`).

    Attributes
    ----------
    by_type : dict of str to int
        ``activity_type -> number`` of pending activities plus scheduled and
        retrying ones that are due; types with none are omitted.
    oldest_ready_ms : int or None
        Ready time (epoch ms) of the oldest of them, ``None`` if there is none.
    """

    by_type: dict[str, int]
    oldest_ready_ms: int | None
