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

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal

import msgspec
from msgspec import UNSET, Meta, Raw, UnsetType

from runnerq_fast.backends import rowcheck
from runnerq_fast.config import MAX_ACTIVITY_TYPE_LENGTH, MAX_DELAY_SECONDS, MAX_TIMEOUT_SECONDS
from runnerq_fast.errors import InvalidActivityError
from runnerq_fast.executor import MAX_IDEMPOTENCY_KEY_LENGTH
from runnerq_fast.filters import ALL_STATUSES, MAX_ACTION_LIMIT, MAX_IDS
from runnerq_fast.models import (
    ActivityEvent,
    ActivityResult,
    ActivitySnapshot,
    QueueStats,
    QueueSummary,
    WorkerInfo,
)

__all__ = [
    "ACTION_BODY",
    "ENQUEUE_BODY",
    "ID_PATTERN",
    "INTEGER_TEXT",
    "JSON_VALUE_SCHEMA",
    "NAME_PATTERN",
    "NUMBER_TEXT",
    "PROBLEM_JSON",
    "PY_WHITESPACE",
    "QUEUE_PATTERN",
    "RUN_AT_PATTERN",
    "SET_PRIORITY_BODY",
    "TIME_PATTERN",
    "ActionBody",
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
    "Id",
    "ItemError",
    "Name",
    "OnDuplicateName",
    "OptionalName",
    "OptionalQueueName",
    "PriorityRequest",
    "PriorityValue",
    "Problem",
    "QueueName",
    "QueueView",
    "QueuesResponse",
    "ResultView",
    "RunnerQStats",
    "SeriesPoint",
    "SetPriorityActionBody",
    "StreamEventView",
    "UnhandledTypeView",
    "WorkerView",
    "WorkersResponse",
    "activity_view",
    "checked_result",
    "decode",
    "encode",
    "event_view",
    "int_range",
    "integral",
    "ms_to_datetime",
    "parse_time",
    "queue_view",
    "raw_json",
    "result_view",
    "runnerq_stats",
    "stream_event_view",
    "text_param",
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



# ------------------------------------------------------------------ limits
# What the service accepts, as JSON Schema: the OpenAPI document states these limits (``extra_json_schema``
# documents a limit without making msgspec enforce it, so the builder's own checks and messages stay the ones
# a client sees; a batch still lists every refused item). Every pattern is valid in both ECMA 262 (JSON
# Schema) and Python's ``re``; the routes that parse query text match it with the same patterns.

PY_WHITESPACE: Final = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)
"""The characters :meth:`str.strip` removes (those for which :meth:`str.isspace` is true)."""

_WS = "".join(f"\\u{ord(c):04x}" for c in PY_WHITESPACE)
_NAME_CHARS = f"[^\\u0000{_WS}]"  # a character that is neither NUL nor whitespace

NAME_PATTERN: Final = f"^[^\\u0000]*{_NAME_CHARS}[^\\u0000]*$"
"""A queue name, activity type or parent id: not blank (whitespace only), no NUL (and 1-255 characters)."""

ID_PATTERN: Final = (
    "^(?:[0-9a-fA-F]{32}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
)
"""An activity id: 32 hex digits, or the dashed UUID form."""

_PRIORITY_WORD = "0*[1-4]|[lL][oO][wW]|[nN][oO][rR][mM][aA][lL]|[hH][iI][gG][hH]|[cC][rR][iI][tT][iI][cC][aA][lL]"
PRIORITY_PATTERN: Final = f"^[{_WS}]*(?:{_PRIORITY_WORD})[{_WS}]*$"
"""A priority as text: 1-4 or low, normal, high, critical (any case; surrounding whitespace ignored)."""


def _listed(item: str) -> str:
    """A comma-separated list of ``item`` (each stripped; an empty one is skipped)."""
    one = f"[{_WS}]*(?:{item})?[{_WS}]*"
    return f"^{one}(?:,{one})*$"


STATUS_LIST_PATTERN: Final = _listed("|".join(ALL_STATUSES))
"""``?status=``: statuses, comma-separated."""
PRIORITY_LIST_PATTERN: Final = _listed(_PRIORITY_WORD)
"""``?priority=``: priorities, comma-separated."""
NAME_LIST_PATTERN: Final = _listed(
    f"[^,\\u0000{_WS}](?:[^,\\u0000]{{0,{MAX_ACTIVITY_TYPE_LENGTH - 2}}}[^,\\u0000{_WS}])?"
)
"""``?type=`` and ``?ids=``: names of at most 255 characters (once stripped), comma-separated."""
METADATA_PATTERN: Final = "^[^=\\u0000]+=[^\\u0000]*$"
"""``?metadata=``: ``key=value`` with a key, no NUL."""

# RFC 3339 section 5.6: "T" and "Z" may be lower case, a fraction has any number of digits; a leap second
# (:60) is refused (neither msgspec nor datetime takes it), and so is the space RFC 3339 allows only in prose
_OFFSET = "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_CLOCK = "[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?"


def _time_pattern(years: str) -> str:
    # with "format": "date-time" beside it, which rules out days such as 02-30
    return f"^(?:{years})-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01]){_CLOCK}{_OFFSET}$"


TIME_PATTERN: Final = _time_pattern("197[1-9]|19[89][0-9]|[2-5][0-9]{3}|6[0-3][0-9]{2}|64[01][0-9]|642[0-8]")
"""A filter's time: RFC 3339 with an offset, years 1971-6428 (the store keeps epoch milliseconds below 2**47)."""
RUN_AT_PATTERN: Final = _time_pattern("197[1-9]|19[89][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8]")
"""``run_at``: RFC 3339 with an offset, years 1971-9998."""


def parse_time(text: str, pattern: str, what: str) -> datetime:
    """An RFC 3339 time matching ``pattern`` (:data:`TIME_PATTERN` or :data:`RUN_AT_PATTERN`), as an aware datetime.

    The server checks the text with the document's own pattern, so that it
    accepts exactly the times the OpenAPI document admits (msgspec alone also
    took ``2030-01-01 00:00:00Z``, and the filters refused ``t`` and ``z``).
    Digits of a fraction beyond microseconds are dropped.

    Raises
    ------
    InvalidActivityError
        When ``text`` does not match ``pattern``, or names no calendar day
        (``2030-02-30``).
    """
    if re.fullmatch(pattern, text) is None:
        raise InvalidActivityError(
            f"{what} must be an RFC 3339 time with a timezone offset, e.g. 2030-01-01T00:00:00Z "
            f"(years {'1971-9998' if pattern == RUN_AT_PATTERN else '1971-6428'}, no leap second), got {text!r}")
    try:
        return datetime.fromisoformat(text.upper())
    except ValueError as exc:
        raise InvalidActivityError(f"{what} is not a valid time ({exc}): {text!r}") from None

CURSOR_PATTERN: Final = "^[A-Za-z0-9_-]{1,200}$"
"""A listing cursor: opaque URL-safe base64 text the server made (any other text is refused with 422)."""

INTEGER_TEXT: Final = re.compile(r"-?[0-9]+")
"""An integer query parameter or header: ASCII digits, optional minus sign (no blank, no ``+``, no ``_``)."""
NUMBER_TEXT: Final = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
"""A number query parameter: ASCII decimal notation (no blank, ``nan``, ``inf`` or ``_``)."""

JSON_VALUE_SCHEMA: Final[dict[str, Any]] = {
    "description": "Any JSON value a store can keep: no NUL character in a text or key.",
    "anyOf": [
        {"type": "null"},
        {"type": "boolean"},
        {"type": "number"},
        {"type": "string", "pattern": "^[^\\u0000]*$"},
        {"type": "array", "items": {"$ref": "#/components/schemas/JsonValue"}},
        {"type": "object", "propertyNames": {"pattern": "^[^\\u0000]*$"},
         "additionalProperties": {"$ref": "#/components/schemas/JsonValue"}},
    ],
}
"""The ``JsonValue`` component of the document: what a payload may hold (see :func:`runnerq_fast.codec.encode_json`)."""

_STRING_NAME = {"minLength": 1, "maxLength": MAX_ACTIVITY_TYPE_LENGTH, "pattern": NAME_PATTERN}
Name = Annotated[str, Meta(extra_json_schema=_STRING_NAME)]
"""A queue name, activity type or parent id (1-255 characters, not blank, no NUL)."""
QUEUE_PATTERN: Final = f"^(?!\\.{{1,2}}$){NAME_PATTERN[1:]}"
"""A queue name: :data:`NAME_PATTERN`, and not ``.`` or ``..`` (a URL path cannot name them)."""
QueueName = Annotated[str, Meta(extra_json_schema={
    "minLength": 1, "maxLength": MAX_ACTIVITY_TYPE_LENGTH, "pattern": QUEUE_PATTERN})]
"""A queue name (1-255 characters, not blank, no NUL, not ``.`` or ``..``)."""
OptionalQueueName = Annotated[str, Meta(extra_json_schema={
    "maxLength": MAX_ACTIVITY_TYPE_LENGTH, "pattern": f"^$|{QUEUE_PATTERN}"})]
"""A queue name, or empty for the default."""
Id = Annotated[str, Meta(extra_json_schema={"pattern": ID_PATTERN})]
"""An activity id (32 hex digits or the dashed UUID form)."""
OptionalName = Annotated[str, Meta(extra_json_schema={
    "maxLength": MAX_ACTIVITY_TYPE_LENGTH, "pattern": f"^$|{NAME_PATTERN}"})]
"""A name, or empty for the default."""


# Integer body fields are decoded as ``int | float``: JSON does not tell ``3`` from ``3.0`` and JSON Schema calls
# both integers, so an integral float is taken (see :func:`integral`); ``3.5`` is refused by the route's check.
PriorityInt = Annotated[int | float, Meta(extra_json_schema={"type": "integer", "minimum": 1, "maximum": 4})]
"""A priority as a number, 1-4."""
RetriesInt = Annotated[int | float, Meta(extra_json_schema={"type": "integer", "minimum": 0, "maximum": 1_000_000})]
"""``max_retries``, 0-1,000,000."""
ActionLimitInt = Annotated[
    int | float, Meta(extra_json_schema={"type": "integer", "minimum": 1, "maximum": MAX_ACTION_LIMIT})
]
"""An action's ``limit``, 1-100,000."""


def integral(value: Any) -> Any:
    """``value`` as an ``int`` when it is a float with no fractional part (``3.0``), else unchanged."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


PriorityValue = PriorityInt | Annotated[str, Meta(extra_json_schema={"pattern": PRIORITY_PATTERN})]
"""1-4, or low, normal, high, critical as text."""
_NO_NUL = {"pattern": "^[^\\u0000]*$"}
NoNul = Annotated[str, Meta(extra_json_schema=_NO_NUL)]
"""Text without NUL."""
FilterTime = Annotated[str, Meta(extra_json_schema={"format": "date-time", "pattern": TIME_PATTERN})]
"""A filter's time (see :data:`TIME_PATTERN`)."""


def int_range(lo: int, hi: int) -> Any:
    """An integer parameter within [lo, hi], as an annotated type for the document."""
    return Annotated[int, Meta(extra_json_schema={"minimum": lo, "maximum": hi})]


def text_param(pattern: str, max_length: int | None = None, *, time: bool = False) -> Any:
    """A text parameter matching ``pattern`` (and an RFC 3339 time if ``time``), as an annotated type for the
    document."""
    extra: dict[str, Any] = {"pattern": pattern}
    if time:
        extra["format"] = "date-time"
    if max_length is not None:
        extra["maxLength"] = max_length
    return Annotated[str, Meta(extra_json_schema=extra)]


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
        1-4 or ``low``, ``normal``, ``high``, ``critical``. Default: the type's
        (registered by its workers), else ``normal``.
    delay : float
        Seconds from now before the activity may start, in [0, 100 years].
    run_at : str
        RFC 3339 time with an offset before which the activity may not start.
        At most one of ``delay`` and ``run_at``.
    max_retries : int
        Retries after the first attempt (0 = never retried). Default: the type's, else 3.
    timeout : float
        Handler timeout in seconds (0 = none). Default: the type's, else 300.
    metadata : object of str
        String key/value pairs, visible to the handler and filterable.
    idempotency_key : str
        Deduplicates within (queue, type); see ``on_duplicate``.
    on_duplicate : str
        What a taken key does; default ``return_existing``.
    """

    type: Annotated[Name, Meta(description="Activity type (handler name), 1-255 characters.")]
    payload: Annotated[Any, Meta(
        description="Any JSON value, passed to the handler; at most max_payload_bytes (1 MiB) encoded.",
        extra_json_schema={"$ref": "#/components/schemas/JsonValue"})] = None
    priority: Annotated[
        PriorityValue | None, Meta(description="1-4, or low|normal|high|critical. Default: the type's, else normal.")
    ] = None
    delay: Annotated[
        Annotated[float, Meta(extra_json_schema={"minimum": 0, "maximum": MAX_DELAY_SECONDS})] | None,
        Meta(description="Seconds from now before it may start, at most 100 years."),
    ] = None
    run_at: Annotated[
        Annotated[str, Meta(extra_json_schema={"format": "date-time", "pattern": RUN_AT_PATTERN})] | None,
        Meta(description="RFC 3339 time (with offset, years 1971-9998); not before then."),
    ] = None
    max_retries: Annotated[
        RetriesInt | None,
        Meta(description="Retries after the first attempt; 0 = never. Default: the type's, else 3."),
    ] = None
    timeout: Annotated[
        Annotated[float, Meta(extra_json_schema={"minimum": 0, "maximum": MAX_TIMEOUT_SECONDS})] | None,
        Meta(description="Handler timeout in seconds, at most a year; 0 = none. Default: the type's, else 300."),
    ] = None
    metadata: Annotated[dict[NoNul, NoNul] | None, Meta(description="String key/value pairs.")] = None
    idempotency_key: Annotated[
        Annotated[str, Meta(extra_json_schema={"minLength": 1, "maxLength": MAX_IDEMPOTENCY_KEY_LENGTH, **_NO_NUL})]
        | None,
        Meta(description="Deduplicates within (queue, type); 1-1024 characters."),
    ] = None
    on_duplicate: OnDuplicateName = "return_existing"


_ONE_START: Final = {"not": {"required": ["delay", "run_at"],
                             "properties": {"delay": {"type": "number"}, "run_at": {"type": "string"}}}}
ENQUEUE_BODY: Final[Any] = Annotated[EnqueueRequest, Meta(extra_json_schema=_ONE_START)]
"""The documented body of an enqueue: an :class:`EnqueueRequest` with ``delay`` or ``run_at``, not both."""


class BatchEnqueueRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Up to 10,000 activities, validated all or nothing and stored in one round trip."""

    activities: list[Annotated[EnqueueRequest, Meta(extra_json_schema=_ONE_START)]]


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
    metadata: dict[str, str]
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
    """Why the stored row cannot be decoded, else ``None``; a damaged payload shows as ``null``, damaged
    metadata as ``{}``."""
    progress: Annotated[Raw, Meta(
        description="The last progress its handler reported: a fraction from 0 to 1 or an object; null if none "
                    "was, and in listings.",
        extra_json_schema={"anyOf": [{"type": "number", "minimum": 0, "maximum": 1}, {"type": "object"}]},
    )] | None = None
    """The last progress its handler reported (``ctx.set_progress``): a fraction from 0 to 1 or an object;
    ``null`` if none was. Given for one activity (``/activities/{id}``), ``null`` in listings."""
    traceback: str | None = None
    """The traceback of the last attempt whose handler raised (at most 16,000 characters, from the handler's frame
    down), in the view of one activity; ``null`` in listings and when no handler of it raised."""


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

    The payload is embedded as stored, without a decode, once a scan has shown
    it is one valid JSON value; a damaged one (a row edited outside this
    library) is embedded as ``null`` and named in ``corrupt``, so one bad row
    never makes a listing's body invalid JSON. The metadata is the snapshot's
    dict (``{}`` when the store's text did not decode, named in ``corrupt`` by the backend).
    """
    bad: list[str] = []
    payload = _checked_json(snap.payload, "payload", bad)
    progress = None if snap.progress is None else _checked_json(snap.progress, "progress", bad)
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
        metadata=snap.metadata,
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
        progress=progress,
        traceback=snap.traceback,
    )


class StreamEventView(msgspec.Struct):
    """One lifecycle event as the live stream sends it; ``id`` orders a queue's events and resumes a stream.

    An :class:`EventView` without ``traceback``: the stream leaves the tracebacks of failed
    attempts out (every watcher would get each one); read them from the activity's events.
    """

    id: int
    activity_id: str
    queue: str
    event_type: str
    at: datetime
    detail: str | None


class EventView(msgspec.Struct):
    """One lifecycle event; ``id`` orders a queue's events and resumes a stream.

    ``traceback`` is that of the failed attempt the event records (``retrying``, ``failed`` or
    ``dead_letter`` after a handler raised; at most 16,000 characters), else ``null``.
    """

    id: int
    activity_id: str
    queue: str
    event_type: str
    at: datetime
    detail: str | None
    traceback: str | None = None


def event_view(ev: ActivityEvent) -> EventView:
    """The wire form of an event, with its failed attempt's traceback."""
    return EventView(
        ev.id, ev.activity_id, ev.queue, ev.event_type, ms_to_datetime(ev.at_ms), ev.detail, ev.traceback
    )


def stream_event_view(ev: ActivityEvent) -> StreamEventView:
    """The live stream's form of an event (no traceback)."""
    return StreamEventView(ev.id, ev.activity_id, ev.queue, ev.event_type, ms_to_datetime(ev.at_ms), ev.detail)


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

    status: list[Annotated[str, Meta(extra_json_schema={"enum": list(ALL_STATUSES)})]] | None = None
    type: Annotated[list[Name], Meta(extra_json_schema={"maxItems": MAX_IDS})] | None = None
    priority: list[PriorityValue] | None = None
    created_after: FilterTime | None = None
    created_before: FilterTime | None = None
    metadata: dict[NoNul, NoNul] | None = None
    parent_id: Name | None = None


class ActionRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A bulk action: by ``ids``, by ``filter``, or both (the ids must then match the filter too).

    ``priority`` (1-4 or a name) is for ``set-priority`` only, and needed there; ``limit`` (1-100,000,
    default 10,000) bounds how many activities change. At least one of ``ids`` and ``filter`` is needed.
    """

    ids: Annotated[list[Name], Meta(extra_json_schema={"maxItems": MAX_IDS})] | None = None
    filter: FilterSpec | None = None
    priority: PriorityValue | None = None
    limit: ActionLimitInt = 10_000


_BY = {"anyOf": [{"required": ["ids"], "properties": {"ids": {"type": "array"}}},
                 {"required": ["filter"], "properties": {"filter": {"type": "object"}}}]}


class ActionBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A bulk action other than ``set-priority``: ``ids``, a ``filter`` or both (one is needed); ``limit``
    (1-100,000, default 10,000) bounds how many activities change. (The document's form of :class:`ActionRequest`.)"""

    ids: Annotated[list[Name], Meta(extra_json_schema={"maxItems": MAX_IDS})] | None = None
    filter: FilterSpec | None = None
    limit: ActionLimitInt = 10_000


class SetPriorityActionBody(ActionBody, kw_only=True, forbid_unknown_fields=True):
    """``set-priority`` in bulk: as the other actions, with the new ``priority`` (1-4 or a name)."""

    priority: PriorityValue


ACTION_BODY: Final[Any] = Annotated[ActionBody, Meta(extra_json_schema=_BY)]
"""The documented body of a bulk action other than ``set-priority`` (``ids`` or ``filter`` needed)."""
SET_PRIORITY_BODY: Final[Any] = Annotated[SetPriorityActionBody, Meta(extra_json_schema=_BY)]
"""The documented body of a bulk ``set-priority``."""


class PriorityRequest(msgspec.Struct, forbid_unknown_fields=True):
    """The new priority of one activity: 1-4 or low, normal, high, critical."""

    priority: PriorityValue


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
    could claim now (``null``: none); ``series`` the last ``window_seconds``
    (900: 15 minutes) in ``bucket_seconds`` buckets, oldest first, from when the
    app began watching the queue (app start for the queues it was given, else
    the queue's first dashboard request: the console shades the part of the
    window before it as "no data yet"); ``workers`` the number of live workers
    of the queue.
    """

    queue: str
    counts: QueueStats
    total: int
    oldest_ready_age: float | None
    bucket_seconds: int
    window_seconds: int
    series: list[SeriesPoint]
    unhandled_types: list[UnhandledTypeView]
    workers: int
    generated_at: datetime


_DECODERS: dict[type, msgspec.json.Decoder[Any]] = {
    t: msgspec.json.Decoder(t)
    for t in (EnqueueRequest, BatchEnqueueRequest, ActionRequest, PriorityRequest)
}
"""One reusable decoder per request Struct, made at import (never changed afterwards)."""
