"""The HTTP wire format: request and response bodies as msgspec Structs, and RFC 9457 problems.

Every body the service reads is decoded into one of these Structs with
validation (unknown fields are refused); every body it writes is encoded
from one. The OpenAPI document (:mod:`runnerq_fast.web.openapi`) is generated
from the same Structs, so the schema never drifts from the code.

Times on the wire are RFC 3339 strings in UTC; durations are seconds.
Stored JSON (payloads, results, metadata) is embedded as is
(:class:`msgspec.Raw`), never decoded and re-encoded.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Raw, UnsetType

from runnerq_fast.backends import rowcheck
from runnerq_fast.models import (
    ActivityEvent,
    ActivityResult,
    ActivitySnapshot,
    QueueStats,
    QueueSummary,
    WorkerInfo,
)

__all__ = [
    "PROBLEM_JSON",
    "ActionRequest",
    "ActionResponse",
    "ActivityDetail",
    "ActivityPageView",
    "ActivityView",
    "BatchEnqueueRequest",
    "BatchEnqueueResponse",
    "BatchItemOutcome",
    "CountView",
    "DashboardView",
    "DeadLetterView",
    "EnqueueRequest",
    "EnqueueResponse",
    "EventView",
    "FilterSpec",
    "Health",
    "ItemError",
    "OnDuplicateName",
    "PriorityRequest",
    "Problem",
    "QueueView",
    "QueuesResponse",
    "ResultView",
    "RunnerQStats",
    "SeriesPoint",
    "UnhandledTypeView",
    "WorkerView",
    "WorkersResponse",
    "activity_view",
    "checked_result",
    "decode",
    "encode",
    "event_view",
    "ms_to_datetime",
    "queue_view",
    "raw_json",
    "result_view",
    "runnerq_stats",
    "worker_view",
]

PROBLEM_JSON = "application/problem+json"
"""Media type of every error body (RFC 9457)."""

OnDuplicateName = Literal["allow_reuse", "return_existing", "allow_reuse_on_failure", "no_reuse"]
"""What a taken idempotency key does; the names of :class:`runnerq_fast.OnDuplicate` in lower case."""

_encoder = msgspec.json.Encoder()


def encode(obj: Any) -> bytes:
    """Encode a Struct (or any msgspec-encodable value) as JSON bytes."""
    return _encoder.encode(obj)


def decode(data: bytes, into: type[Any]) -> Any:
    """Decode ``data`` into the request Struct ``into`` with validation.

    Raises
    ------
    msgspec.DecodeError
        Malformed JSON.
    msgspec.ValidationError
        Well-formed JSON that does not match ``into`` (a subclass of DecodeError).
    KeyError
        If ``into`` is not a request Struct of this module.
    """
    try:
        return _DECODERS[into].decode(data)
    except RecursionError:
        # msgspec decodes nested arrays and objects recursively: a body nested ~100k deep
        raise msgspec.DecodeError("the body is nested too deeply to decode") from None


# --------------------------------------------------------------- problems
class ItemError(msgspec.Struct, frozen=True):
    """Why one activity of a batch was refused (``index`` counts from 0)."""

    index: int
    detail: str


class Problem(msgspec.Struct, omit_defaults=True):
    """An RFC 9457 problem: the body of every error response.

    ``type`` is a URI naming the kind of problem (``about:blank`` for a plain
    HTTP status); ``detail`` says what to change; ``errors`` lists the refused
    items of a batch.
    """

    title: str
    status: int
    detail: str
    type: str = "about:blank"
    instance: str | UnsetType = UNSET
    errors: list[ItemError] | UnsetType = UNSET
    existing_id: str | UnsetType = UNSET


class Health(msgspec.Struct):
    """Body of ``/healthz`` and ``/readyz``: ``status`` is ``ok``."""

    status: str
    backend: str | UnsetType = UNSET


# ---------------------------------------------------------------- enqueue
class EnqueueRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One activity to enqueue.

    Attributes
    ----------
    type : str
        The activity type (handler name), 1-255 characters.
    payload : any JSON value
        Passed to the handler. Default ``null``. At most ``max_payload_bytes``
        (1 MiB by default) once encoded.
    priority : int or str
        1-4 or ``low``, ``normal``, ``high``, ``critical``. Default ``normal``.
    delay : float
        Seconds from now before the activity may start, in [0, 100 years].
    run_at : str
        RFC 3339 time with an offset before which the activity may not start.
        At most one of ``delay`` and ``run_at``.
    max_retries : int
        Retries after the first attempt (0 = never retried). Default 3.
    timeout : float
        Handler timeout in seconds (0 = none). Default 300.
    metadata : object of str
        String key/value pairs, visible to the handler and filterable.
    idempotency_key : str
        Deduplicates within (queue, type); see ``on_duplicate``.
    on_duplicate : str
        What a taken key does; default ``return_existing``.
    """

    type: Annotated[str, Meta(description="Activity type (handler name), 1-255 characters.")]
    payload: Annotated[Any, Meta(description="Any JSON value, passed to the handler.")] = None
    priority: Annotated[
        int | str | None, Meta(description="1-4, or low|normal|high|critical. Default normal.")
    ] = None
    delay: Annotated[float | None, Meta(description="Seconds from now before it may start.")] = None
    run_at: Annotated[datetime | None, Meta(description="RFC 3339 time (with offset); not before then.")] = None
    max_retries: Annotated[int | None, Meta(description="Retries after the first attempt; 0 = never.")] = None
    timeout: Annotated[float | None, Meta(description="Handler timeout in seconds; 0 = none.")] = None
    metadata: Annotated[dict[str, str] | None, Meta(description="String key/value pairs.")] = None
    idempotency_key: Annotated[str | None, Meta(description="Deduplicates within (queue, type).")] = None
    on_duplicate: OnDuplicateName = "return_existing"


class BatchEnqueueRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Up to 10,000 activities, validated all or nothing and stored in one round trip."""

    activities: list[EnqueueRequest]


class EnqueueResponse(msgspec.Struct, omit_defaults=True):
    """An enqueued activity.

    ``created`` is false when an idempotency key returned an existing
    activity. With ``?wait=`` the activity's terminal ``status`` and its
    ``result`` (completed) or ``error`` follow once it finished.
    """

    id: str
    queue: str
    created: bool
    status: str | UnsetType = UNSET
    result: Raw | UnsetType = UNSET
    error: str | UnsetType | None = UNSET
    corrupt: str | UnsetType = UNSET
    """Present when the stored result is not one valid JSON value (``result`` is then ``null``)."""


BatchOutcome = Literal["created", "existing", "conflict"]


class BatchItemOutcome(msgspec.Struct):
    """What the store did with one activity of a batch.

    ``conflict``: a ``no_reuse`` idempotency key was taken; ``id`` is then the
    key's holder and nothing was stored for this item.
    """

    id: str
    outcome: BatchOutcome


class BatchEnqueueResponse(msgspec.Struct):
    """The outcome of each activity of a batch, in request order."""

    queue: str
    activities: list[BatchItemOutcome]


# -------------------------------------------------------------- inspection
def ms_to_datetime(ms: int) -> datetime:
    """Epoch milliseconds as an aware UTC :class:`datetime`."""
    return datetime.fromtimestamp(ms / 1000.0, UTC)


def _opt_dt(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000.0, UTC)


def raw_json(data: bytes | str | None) -> Raw:
    """Stored JSON text wrapped for embedding without a decode (``null`` for ``None``)."""
    if data is None:
        return Raw(b"null")
    return Raw(data)


class ActivityView(msgspec.Struct):
    """One activity as stored.

    ``ready_at`` is when it may start (its scheduled or retry time, else its
    creation time); ``timeout`` is in seconds (0 = none).
    """

    id: str
    queue: str
    activity_type: str
    status: str
    priority: int
    payload: Raw
    metadata: Raw
    retry_count: int
    max_retries: int
    timeout: float
    created_at: datetime
    ready_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    lease_expires_at: datetime | None
    last_error: str | None
    idempotency_key: str | None
    parent_id: str | None = None
    corrupt: str | None = None
    """Why the stored row cannot be decoded, else ``None``; a damaged payload or metadata shows as ``null``."""


def _checked_json(data: bytes | str | None, name: str, bad: list[str]) -> Raw:
    """``data`` for embedding when it is one valid JSON value, else ``null`` and a reason appended to ``bad``."""
    if data is None:
        return Raw(b"null")
    try:
        msgspec.json.decode(data, type=Raw)  # a scan that builds nothing: malformed text, bad UTF-8, trailing bytes
    except msgspec.DecodeError:
        bad.append(f"{name} is not valid JSON")
        return Raw(b"null")
    return Raw(data)


def activity_view(snap: ActivitySnapshot) -> ActivityView:
    """The wire form of a stored activity.

    The payload and metadata are embedded as stored, without a decode, once a
    scan has shown each is one valid JSON value; a damaged one (a row edited
    outside this library) is embedded as ``null`` and named in ``corrupt``, so
    one bad row never makes a listing's body invalid JSON.
    """
    bad: list[str] = []
    payload = _checked_json(snap.payload, "payload", bad)
    metadata = _checked_json(snap.metadata, "metadata", bad)
    corrupt = snap.corrupt
    if bad:
        corrupt = (corrupt + "; " if corrupt is not None else rowcheck.PREFIX) + "; ".join(bad)
    return ActivityView(
        id=snap.id,
        queue=snap.queue,
        activity_type=snap.activity_type,
        status=snap.status,
        priority=snap.priority,
        payload=payload,
        metadata=metadata,
        retry_count=snap.retry_count,
        max_retries=snap.max_retries,
        timeout=snap.timeout_ms / 1000.0,
        created_at=ms_to_datetime(snap.created_at_ms),
        ready_at=ms_to_datetime(snap.ready_at_ms),
        started_at=_opt_dt(snap.started_at_ms),
        finished_at=_opt_dt(snap.finished_at_ms),
        lease_expires_at=_opt_dt(snap.lease_expires_at_ms),
        last_error=snap.last_error,
        idempotency_key=snap.idempotency_key,
        parent_id=getattr(snap, "parent_id", None),
        corrupt=corrupt,
    )


class EventView(msgspec.Struct):
    """One lifecycle event; ``id`` orders a queue's events and resumes a stream."""

    id: int
    activity_id: str
    queue: str
    event_type: str
    at: datetime
    detail: str | None


def event_view(ev: ActivityEvent) -> EventView:
    """The wire form of an event."""
    return EventView(ev.id, ev.activity_id, ev.queue, ev.event_type, ms_to_datetime(ev.at_ms), ev.detail)


class ResultView(msgspec.Struct):
    """The stored outcome of a finished activity: ``result`` (completed) or ``error``."""

    activity_id: str
    status: str
    result: Raw
    error: str | None
    corrupt: str | None = None
    """Why the stored result is shown as ``null`` (it is not one valid JSON value), else ``None``."""


def checked_result(data: bytes | str | None) -> tuple[Raw, str | None]:
    """A stored result for embedding, and why it is shown as ``null`` when it is not one valid JSON value.

    A result damaged outside this library (truncated text, bytes that are not
    UTF-8) would otherwise make the whole response body invalid JSON.
    """
    bad: list[str] = []
    raw = _checked_json(data, "result", bad)
    return raw, (rowcheck.PREFIX + bad[0]) if bad else None


def result_view(res: ActivityResult) -> ResultView:
    """The wire form of a stored result; a damaged one is ``null`` and named in ``corrupt``."""
    raw, corrupt = checked_result(res.data)
    return ResultView(res.activity_id, res.status, raw, res.error, corrupt)


class DeadLetterView(msgspec.Struct):
    """A dead-lettered activity, why, and when (RunnerQ's record)."""

    activity: ActivityView
    error: str | None
    failed_at: datetime


class RunnerQStats(msgspec.Struct):
    """Counts by status in RunnerQ's ``/stats`` shape, plus the queue and the statuses RunnerQ lacks."""

    queue: str
    pending_activities: int
    processing_activities: int
    scheduled_activities: int
    retrying_activities: int
    completed_activities: int
    failed_activities: int
    dead_letter_activities: int
    cancelled_activities: int
    total_activities: int


def runnerq_stats(queue: str, st: QueueStats) -> RunnerQStats:
    """RunnerQ-shaped counts of one queue."""
    return RunnerQStats(
        queue=queue,
        pending_activities=st.pending,
        processing_activities=st.processing,
        scheduled_activities=st.scheduled,
        retrying_activities=st.retrying,
        completed_activities=st.completed,
        failed_activities=st.failed,
        dead_letter_activities=st.dead_letter,
        cancelled_activities=st.cancelled,
        total_activities=st.total,
    )


class ActivityDetail(msgspec.Struct):
    """One activity with its events (oldest first), its result and its first page of child activities
    (oldest first; ``children_next_cursor`` continues at ``.../children?cursor=``)."""

    activity: ActivityView
    events: list[EventView]
    result: ResultView | None
    children: list[ActivityView]
    children_next_cursor: str | None


# ---------------------------------------------------------------------- v1
class QueueView(msgspec.Struct):
    """One queue at a glance: counts by status and by activity type, and its oldest ready activity.

    ``oldest_ready_at`` is the ready time of the oldest activity a worker could
    claim now (``null`` when there is none).
    """

    queue: str
    total: int
    counts: QueueStats
    by_type: dict[str, dict[str, int]]
    oldest_ready_at: datetime | None


class QueuesResponse(msgspec.Struct):
    """Every queue the store knows, by name."""

    queues: list[QueueView]


class ActivityPageView(msgspec.Struct):
    """One page of a listing; pass ``next_cursor`` back as ``?cursor=`` until it is ``null``.

    A page may hold fewer than ``limit`` items (even none) and still have a
    cursor: a priority or metadata condition examines a bounded number of rows
    per request.
    """

    items: list[ActivityView]
    next_cursor: str | None


class CountView(msgspec.Struct):
    """How many activities match; ``exact`` is false when counting stopped at the cap (at least ``count``)."""

    count: int
    exact: bool


class FilterSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """Which activities an action applies to: the listing's filter, as a JSON object.

    Every given field must match; within a list any value matches. ``{}``
    matches every activity of the queue.
    """

    status: list[str] | None = None
    type: list[str] | None = None
    priority: list[int | str] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    metadata: dict[str, str] | None = None
    parent_id: str | None = None


class ActionRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A bulk action: by ``ids``, by ``filter``, or both (the ids must then match the filter too).

    ``priority`` (1-4 or a name) is for ``set-priority`` only; ``limit`` (1-100,000,
    default 10,000) bounds how many activities change.
    """

    ids: list[str] | None = None
    filter: FilterSpec | None = None
    priority: int | str | None = None
    limit: int = 10_000


class PriorityRequest(msgspec.Struct, forbid_unknown_fields=True):
    """The new priority of one activity: 1-4 or low, normal, high, critical."""

    priority: int | str


class ActionResponse(msgspec.Struct):
    """What an action did: the ids it ``changed`` and how many matched activities it ``skipped``
    (not in a state the action applies to)."""

    action: str
    changed: list[str]
    changed_count: int
    skipped: int


def queue_view(s: QueueSummary) -> QueueView:
    """The wire form of a queue summary."""
    return QueueView(s.queue, s.counts.total, s.counts, s.by_type, _opt_dt(s.oldest_ready_ms))


# --------------------------------------------------------------- dashboard
class WorkerView(msgspec.Struct):
    """One live engine of the worker registry.

    ``types`` are the activity types it claims (``["*"]``: any); ``in_flight``
    the activities it held at its last heartbeat (``last_seen``), out of
    ``concurrency`` worker slots.
    """

    id: str
    queue: str
    host: str
    pid: int
    types: list[str]
    in_flight: int
    concurrency: int
    started_at: datetime
    last_seen: datetime


class WorkersResponse(msgspec.Struct):
    """The live workers, ordered by queue then id."""

    workers: list[WorkerView]


def worker_view(w: WorkerInfo) -> WorkerView:
    """The wire form of a registry entry."""
    return WorkerView(w.worker_id, w.queue, w.host, w.pid, list(w.activity_types), w.in_flight, w.concurrency,
                      ms_to_datetime(w.started_at_ms), ms_to_datetime(w.last_seen_ms))


class SeriesPoint(msgspec.Struct):
    """One bucket of the dashboard's series, starting at ``at`` and ``bucket_seconds`` long.

    ``completed`` and ``failed`` (failed or dead-lettered) count activities
    that ended in the bucket; ``wait_p50`` / ``wait_p95`` are the median and
    95th percentile, in seconds, of ready-to-claim waits of activities claimed
    in it (``null`` when none was), estimated from a sample of at most 64 claims.
    """

    at: datetime
    completed: int
    failed: int
    wait_p50: float | None
    wait_p95: float | None


class UnhandledTypeView(msgspec.Struct):
    """An activity type with ``ready`` activities a worker could claim now and no live worker claiming it."""

    type: str
    ready: int


class DashboardView(msgspec.Struct):
    """One queue's dashboard, read at ``generated_at`` and reused for about a second.

    ``counts`` are activities by status (``total`` their sum);
    ``oldest_ready_age`` the age in seconds of the oldest activity a worker
    could claim now (``null``: none); ``series`` the last 15 minutes in
    ``bucket_seconds`` buckets, oldest first, from when the app began watching
    the queue (app start for the queues it was given, else the queue's first
    dashboard request); ``workers`` the number of live workers of the queue.
    """

    queue: str
    counts: QueueStats
    total: int
    oldest_ready_age: float | None
    bucket_seconds: int
    series: list[SeriesPoint]
    unhandled_types: list[UnhandledTypeView]
    workers: int
    generated_at: datetime


_DECODERS: dict[type, msgspec.json.Decoder[Any]] = {
    t: msgspec.json.Decoder(t)
    for t in (EnqueueRequest, BatchEnqueueRequest, ActionRequest, PriorityRequest)
}
"""One reusable decoder per request Struct, made at import (never changed afterwards)."""
