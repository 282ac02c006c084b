"""Enqueueing: :class:`ActivityExecutor`, its builder and :class:`ActivityFuture`."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import logging
import math
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, Self, overload

import msgspec

from runnerq_fast.codec import decode_json, encode_metadata, encode_payload
from runnerq_fast.config import (
    DOT_SEGMENTS,
    MAX_ACTIVITY_TYPE_LENGTH,
    MAX_DELAY_SECONDS,
    MAX_TIMEOUT_SECONDS,
    WorkerConfig,
    dot_segment_message,
)
from runnerq_fast.errors import (
    ActivityCancelled,
    ActivityFailed,
    BackendError,
    CorruptResultError,
    DuplicateActivityError,
    InvalidActivityError,
    StoreBusyError,
)
from runnerq_fast.ids import new_activity_id, new_activity_ids
from runnerq_fast.metrics import ACTIVITIES_ENQUEUED, LabelledMetricsSink
from runnerq_fast.models import (
    ActivityResult,
    EnqueueOutcome,
    EnqueueResult,
    NewActivity,
    OnDuplicate,
    Priority,
    TypeDefaults,
)
from runnerq_fast.progress import Progress, decode_progress
from runnerq_fast.resilience import busy_attempts, busy_limit
from runnerq_fast.storage import Backend

if TYPE_CHECKING:
    from typing_extensions import TypeVar  # a default (PEP 696): a bare ActivityBuilder is ActivityBuilder[Any]
else:
    from typing import TypeVar

__all__ = [
    "TYPE_DEFAULTS_TTL",
    "ActivityBuilder",
    "ActivityExecutor",
    "ActivityFuture",
    "BlockingBuilder",
    "BlockingExecutor",
    "PieceSize",
    "check_type_options",
    "enqueue_in_pieces",
    "handler_activity_type",
    "mark_handler",
    "validate_activity_type",
    "validate_queue_name",
]

log = logging.getLogger(__name__)

MAX_IDEMPOTENCY_KEY_LENGTH = 1024
"""Longest accepted idempotency key, in characters."""

_ENCODED_EMPTY = b"{}"
"""Stored metadata of an activity without any (``encode_metadata(None)``)."""
_NORMAL = int(Priority.NORMAL)
_RETURN_EXISTING = int(OnDuplicate.RETURN_EXISTING)
_NOTHING: Any = object()
"""No payload seen yet (a batch's first item)."""
_GROW_AFTER = 4
"""Pieces in a row that must land before a reduced piece size doubles (as the engine's batches)."""

TYPE_DEFAULTS_TTL = 5.0
"""Seconds a producer keeps the per-type enqueue defaults it read from the store
(:meth:`~runnerq_fast.storage.Backend.get_type_defaults`) before reading them again: a worker started
with new ``@engine.activity(..., max_retries=...)`` options reaches every producer within this time."""

if TYPE_CHECKING:
    PayloadT = TypeVar("PayloadT", default=Any)
    """The payload type of an :class:`ActivityBuilder` (``Any`` for one started from a type name)."""
else:
    PayloadT = TypeVar("PayloadT")  # typing.TypeVar takes a default from Python 3.13

HANDLER_TYPE_ATTR = "__runnerq_activity_type__"
"""Attribute :meth:`WorkerEngine.register_activity` sets on a handler: its activity type, or a tuple of several."""


class PieceSize:
    """How many activities :func:`enqueue_in_pieces` sends per call; kept by a producer that batches often.

    Attributes
    ----------
    size : int
        Activities per piece; ``0`` (the start): a batch goes whole. Set to
        half a piece the store cancelled, and doubled after every
        :data:`_GROW_AFTER` pieces in a row that land, so a size just under
        the server's limit is not doubled straight back over it.
    """

    __slots__ = ("_landed", "size")

    def __init__(self) -> None:
        self.size = 0
        self._landed = 0


async def enqueue_in_pieces(
    backend: Backend,
    queue: str,
    items: Sequence[NewActivity],
    results: list[EnqueueResult],
    pieces: PieceSize | None = None,
) -> None:
    """Store ``items`` in order, sending a batch the store cancels again in halves; append their results.

    A batch of more than one activity is tried once
    (:func:`~runnerq_fast.resilience.busy_attempts`): when the store cancels
    it (:class:`~runnerq_fast.errors.StoreBusyError`: PostgreSQL's
    ``statement_timeout`` or ``lock_timeout``, a deadlock, a SQLite database
    locked past its busy timeout) nothing of it was applied, and the same
    items go again in pieces of half the size, in input order, down to one
    activity at a time; a single activity is retried as any backend call
    (for the backend's ``retry_timeout``). Every item is still decided by
    the store in input order, so idempotency keys and ``on_duplicate``
    resolve exactly as for the whole batch, and ``results`` matches ``items``.
    Without a cancellation this is one ``Backend.enqueue`` call.

    Inside the caller's own :func:`~runnerq_fast.resilience.busy_attempts`
    block the batch is not split: the caller gets the error.

    Parameters
    ----------
    backend : Backend
        Where the activities are stored.
    queue : str
        The queue (already validated).
    items : sequence of NewActivity
        Built and validated.
    results : list of EnqueueResult
        Receives one result per stored item, in input order, as each piece
        lands: after an error, its length is the number of leading items
        stored.
    pieces : PieceSize, optional
        The piece size learnt from earlier batches (and updated); default a
        fresh one (the batch is first sent whole).

    Raises
    ------
    BackendError
        What the first piece that could not be stored raised
        (:class:`~runnerq_fast.errors.StoreBusyError` when even one activity
        was cancelled until the backend's ``retry_timeout``); its
        :attr:`~runnerq_fast.errors.BackendError.enqueued` names the items
        stored before it. Any other exception passes through.
    """
    n = len(items)
    if n < 2 or busy_limit() is not None:
        results += await backend.enqueue(queue, items)
        return
    size = 0 if pieces is None else pieces.size
    landed = 0 if pieces is None else pieces._landed
    first = len(results)
    start = 0
    try:
        while start < n:
            piece = items if start == 0 and (size == 0 or size >= n) else items[start : start + size]
            sent = len(piece)
            try:
                if sent > 1:
                    with busy_attempts(1):  # a cancelled piece comes back at once, to be sent smaller
                        results += await backend.enqueue(queue, piece)
                else:
                    results += await backend.enqueue(queue, piece)
            except StoreBusyError as exc:
                if sent == 1:
                    raise
                size, landed = sent // 2, 0
                (log.warning if start == 0 and sent == n else log.info)(
                    "enqueue of %d activities (items %d to %d of %d) cancelled by the store (%s); nothing of "
                    "it was applied, sending it again in pieces of %d", sent, start, start + sent - 1, n, exc, size,
                )
                continue
            start += sent
            if size:
                landed += 1
                if landed >= _GROW_AFTER:
                    size, landed = size * 2, 0
    except BackendError as exc:
        if len(results) > first:
            exc.enqueued = tuple(r.activity_id for r in results[first:])
        raise
    finally:
        if pieces is not None:
            pieces.size, pieces._landed = size, landed


def _check_encodable(value: str, what: str) -> None:
    """Refuse text that has no UTF-8 form (a lone surrogate such as ``"\\udcff"``): no store can hold it."""
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError as exc:
            raise InvalidActivityError(
                f"{what} holds text that cannot be encoded as UTF-8 ({exc.reason} at index {exc.start}): {value!r}"
            ) from None


def _validate_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidActivityError(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > MAX_ACTIVITY_TYPE_LENGTH:
        raise InvalidActivityError(f"{what} is {len(value)} characters, over the limit of {MAX_ACTIVITY_TYPE_LENGTH}")
    if "\x00" in value:
        raise InvalidActivityError(f"{what} must not contain NUL")
    _check_encodable(value, what)
    return value


def _seconds(value: object, what: str, maximum: float, note: str = "") -> float:
    """``value`` as float seconds within [0, maximum], else :class:`InvalidActivityError`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidActivityError(f"{what} must be a finite number of seconds, got {value!r}")
    if not 0 <= value <= maximum:
        raise InvalidActivityError(f"{what} must be within [0, {maximum:.0f}] seconds{note}, got {value!r}")
    return float(value)


def check_type_options(max_retries: object, timeout: object, priority: object) -> None:
    """Validate options as :class:`ActivityBuilder`'s setters do; ``None`` is "not set" and passes.

    Raises
    ------
    InvalidActivityError
        ``max_retries`` not an int in [0, 1000000], ``timeout`` not seconds in
        [0, ``MAX_TIMEOUT_SECONDS``], ``priority`` not 1-4.
    """
    if max_retries is not None and (
        isinstance(max_retries, bool) or not isinstance(max_retries, int) or not 0 <= max_retries <= 1_000_000
    ):
        raise InvalidActivityError(f"max_retries must be an int in [0, 1000000], got {max_retries!r}")
    if timeout is not None:
        _seconds(timeout, "timeout", MAX_TIMEOUT_SECONDS, " (0 = none)")
    if priority is not None and (
        isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= int(priority) <= 4
    ):
        raise InvalidActivityError(f"priority must be 1-4 (Priority.LOW..CRITICAL), got {priority!r}")


def validate_queue_name(queue_name: object) -> str:
    """Return ``queue_name`` if it is usable.

    Raises
    ------
    InvalidActivityError
        If it is not a string, is blank, longer than 255 characters, holds
        NUL, has no UTF-8 form (a lone surrogate), or is ``.`` or ``..``
        (a URL path cannot name those: the HTTP routes could not reach them).
    """
    name = _validate_name(queue_name, "queue name")
    if name in DOT_SEGMENTS:
        raise InvalidActivityError(dot_segment_message("queue name", name))
    return name


def validate_activity_type(activity_type: object) -> str:
    """Return ``activity_type`` if it is a usable name.

    Raises
    ------
    InvalidActivityError
        If it is not a string, is blank, longer than 255 characters, holds
        NUL or has no UTF-8 form (a lone surrogate).
    """
    return _validate_name(activity_type, "activity type")


def mark_handler(handler: Callable[..., Any], activity_type: str) -> None:
    """Record on ``handler`` that it handles ``activity_type`` (see :func:`handler_activity_type`).

    Registered for several types (the same function under two names), it
    keeps them all; one that takes no attributes (a bound method, a builtin)
    is left as it is: it is then enqueued by its type name.
    """
    current = getattr(handler, HANDLER_TYPE_ATTR, None)
    names = (current,) if isinstance(current, str) else current if isinstance(current, tuple) else ()
    if activity_type in names:
        return
    with contextlib.suppress(AttributeError, TypeError):
        setattr(handler, HANDLER_TYPE_ATTR, tuple(sorted({*names, activity_type})) if names else activity_type)


def handler_activity_type(handler: object) -> str:
    """The activity type ``handler`` was registered for (``@engine.activity(name)`` in this process).

    Raises
    ------
    InvalidActivityError
        If it was never registered, or was registered for several types.
    """
    name = getattr(handler, HANDLER_TYPE_ATTR, None)
    if isinstance(name, str):
        return name
    what = getattr(handler, "__qualname__", type(handler).__name__)
    if isinstance(name, tuple):
        raise InvalidActivityError(
            f"handler {what} is registered for several activity types ({', '.join(map(repr, name))}): "
            "give the name of the one to enqueue"
        )
    raise InvalidActivityError(
        f"{what} is not a registered handler: enqueue by a handler registered with @engine.activity(name) in this "
        "process, or by the activity type's name"
    )


class ActivityFuture:
    """A handle on an enqueued activity.

    Attributes
    ----------
    activity_id : str
        The activity's id.
    created : bool
        ``False`` when an idempotency key returned an existing activity.
    """

    __slots__ = ("_backend", "activity_id", "created")

    def __init__(self, backend: Backend, activity_id: str, created: bool = True) -> None:
        self._backend = backend
        self.activity_id = activity_id
        self.created = created

    def __repr__(self) -> str:
        return f"ActivityFuture({self.activity_id!r}, created={self.created})"

    async def result(self, timeout: float | None = None) -> Any:
        """Wait for the activity to finish and return its decoded result.

        Woken by the backend's notification (LISTEN/NOTIFY, pub/sub or an
        in-process event), not by polling.

        Parameters
        ----------
        timeout : float or None
            Seconds to wait; ``None`` waits forever.

        Returns
        -------
        Any
            The handler's return value, decoded from JSON.

        Raises
        ------
        ActivityFailed
            The activity ended ``failed`` or ``dead_letter``.
        ActivityCancelled
            The activity was cancelled.
        CorruptResultError
            It completed, but its stored result does not decode (damaged outside this library).
        TimeoutError
            ``timeout`` seconds passed first.
        BackendError
            The store is unreachable or failed and still was when ``timeout``
            passed (or, with ``timeout=None``, after the backend's
            ``retry_timeout``); the driver's exception is the ``__cause__``.
            Either way the call returns within ``timeout``.
        """
        res = await self._backend.wait_for_result(self.activity_id, timeout)
        if res is None:
            raise TimeoutError(f"activity {self.activity_id} did not finish within {timeout} s")
        return unwrap_result(res)

    async def status(self) -> str | None:
        """The activity's current status, or ``None`` if it is unknown."""
        snap = await self._backend.get_activity(self.activity_id)
        return None if snap is None else snap.status

    async def progress(self) -> Progress | None:
        """The last progress its handler reported (``ctx.set_progress``): a fraction from 0 to 1 or a
        dict; ``None`` if none was, or the activity is unknown."""
        snap = await self._backend.get_activity(self.activity_id)
        return None if snap is None else decode_progress(snap.progress)


def unwrap_result(res: ActivityResult) -> Any:
    """Turn a stored result into a value or the matching exception.

    Raises
    ------
    ActivityFailed, ActivityCancelled
        The activity ended without completing.
    CorruptResultError
        It completed, but the stored result is not one valid JSON value (damaged outside this library).
    """
    if res.status == "completed":
        if res.data is None:
            return None
        try:
            return decode_json(res.data)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            raise CorruptResultError(res.activity_id, str(exc)) from None
    if res.status == "cancelled":
        raise ActivityCancelled(res.activity_id)
    raise ActivityFailed(res.activity_id, res.status, res.error, res.traceback)


class ActivityBuilder(Generic[PayloadT]):
    """Fluent description of one activity; finish with :meth:`execute`.

    Obtained from :meth:`ActivityExecutor.activity`. Each setter validates its
    argument and raises :class:`InvalidActivityError` at the call. Generic in
    the payload type: started from a handler (``executor.activity(charge)``),
    :meth:`payload` takes what the handler's payload parameter is annotated
    with, checked by a type checker; from a type name, ``Any``.
    """

    __slots__ = (
        "_delay",
        "_executor",
        "_idem_key",
        "_inherit",
        "_max_retries",
        "_metadata",
        "_on_duplicate",
        "_payload",
        "_priority",
        "_run_at",
        "_timeout",
        "activity_type",
    )

    def __init__(self, executor: ActivityExecutor, activity_type: str | Callable[..., object]) -> None:
        self._executor = executor
        if type(activity_type) is not str and callable(activity_type):
            activity_type = handler_activity_type(activity_type)
        self.activity_type = validate_activity_type(activity_type)
        self._payload: Any = None
        self._priority: int | None = None  # None: the type's default, else NORMAL
        self._delay: float = 0.0
        self._run_at: float | None = None
        self._max_retries: int | None = None
        self._timeout: float | None = None
        self._metadata: dict[str, str] | None = None
        self._inherit = True
        self._idem_key: str | None = None
        self._on_duplicate = OnDuplicate.RETURN_EXISTING

    def payload(self, payload: PayloadT) -> Self:
        """Set the payload passed to the handler.

        JSON values, and the typed values of :data:`runnerq_fast.codec.TYPED`
        (datetime, UUID, Decimal, an enum member, a msgspec Struct, a
        dataclass...) that a handler annotating its payload gets back as
        they were; see :func:`runnerq_fast.codec.encode_payload`.
        """
        self._payload = payload
        return self

    def priority(self, priority: Priority | int) -> Self:
        """Set the priority, 1 (LOW) to 4 (CRITICAL); default the type's (``@engine.activity(priority=...)``),
        else NORMAL."""
        if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= int(priority) <= 4:
            raise InvalidActivityError(f"priority must be 1-4 (Priority.LOW..CRITICAL), got {priority!r}")
        self._priority = int(priority)
        return self

    def delay(self, seconds: float) -> Self:
        """Make the activity ready ``seconds`` (>= 0) from now."""
        self._delay = _seconds(seconds, "delay", MAX_DELAY_SECONDS)
        self._run_at = None
        return self

    def run_at(self, when: datetime | float) -> Self:
        """Make the activity ready at ``when`` (aware datetime or epoch seconds)."""
        if isinstance(when, datetime):
            if when.tzinfo is None:
                raise InvalidActivityError("run_at needs a timezone-aware datetime")
            ts = when.astimezone(UTC).timestamp()
        elif isinstance(when, int | float) and not isinstance(when, bool) and math.isfinite(when):
            ts = float(when)
        else:
            raise InvalidActivityError(f"run_at must be a datetime or epoch seconds, got {when!r}")
        if ts < 0 or ts > 253402300799:  # year 9999
            raise InvalidActivityError(f"run_at is out of range: {when!r}")
        self._run_at = ts
        self._delay = 0.0
        return self

    def max_retries(self, retries: int) -> Self:
        """Set retries after the first attempt (0 = never retried); default the type's, else the config's."""
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 1_000_000:
            raise InvalidActivityError(f"max_retries must be an int in [0, 1000000], got {retries!r}")
        self._max_retries = retries
        return self

    def timeout(self, seconds: float) -> Self:
        """Set the handler timeout in seconds (0 = none); default the type's, else the config's."""
        self._timeout = _seconds(seconds, "timeout", MAX_TIMEOUT_SECONDS, " (0 = none)")
        return self

    def metadata(self, metadata: dict[str, str], *, inherit: bool = True) -> Self:
        """Attach string key/value metadata, visible to the handler and inspector.

        Keys and values must be strings that encode to UTF-8; the encoded
        object is capped by ``max_payload_bytes`` like the payload (checked
        by :meth:`build`).

        Parameters
        ----------
        metadata : dict of str to str
            The keys to set.
        inherit : bool
            For a child activity (enqueued through ``ctx.executor``): keep the
            parent's metadata and update it with ``metadata`` (default), or
            store ``metadata`` alone (``False``). No effect elsewhere.
        """
        if not isinstance(metadata, dict):
            raise InvalidActivityError("metadata must be a dict of str to str")
        self._metadata = dict(metadata)
        self._inherit = bool(inherit)
        return self

    def _encoded_metadata(self, max_bytes: int) -> bytes:
        """The metadata to store (at most ``max_bytes`` encoded): the parent's (if inherited) updated with this
        builder's."""
        own = self._metadata
        inherited = self._executor.inherited_metadata if self._inherit else None
        if inherited is None:
            return encode_metadata(own, max_bytes)
        if isinstance(inherited, Mapping):
            return encode_metadata({**inherited, **own} if own else dict(inherited), max_bytes)
        if not own:
            return inherited.encode() if isinstance(inherited, str) else inherited  # stored as it came
        parent = decode_json(inherited) if inherited not in (b"{}", "{}", b"", "") else {}
        return encode_metadata({**parent, **own} if isinstance(parent, dict) else own, max_bytes)

    def idempotency_key(self, key: str, on_duplicate: OnDuplicate = OnDuplicate.RETURN_EXISTING) -> Self:
        """Deduplicate on ``key`` within (queue, activity type), see :class:`OnDuplicate`."""
        if not isinstance(key, str) or not key or len(key) > MAX_IDEMPOTENCY_KEY_LENGTH:
            raise InvalidActivityError(
                f"idempotency key must be a non-empty string of at most {MAX_IDEMPOTENCY_KEY_LENGTH} characters"
            )
        if "\x00" in key:
            raise InvalidActivityError("idempotency key must not contain NUL")
        _check_encodable(key, "idempotency key")
        try:
            self._on_duplicate = OnDuplicate(on_duplicate)
        except ValueError:
            raise InvalidActivityError(f"on_duplicate must be an OnDuplicate, got {on_duplicate!r}") from None
        self._idem_key = key
        return self

    def build(self) -> NewActivity:
        """Validate and encode into a :class:`NewActivity` without enqueueing it.

        An option not set here takes the type's default
        (``@engine.activity(..., max_retries=, timeout=, priority=)``) as this
        executor last read it (:meth:`ActivityExecutor.type_defaults`; the
        async :meth:`execute` reads it first when it is older than
        :data:`TYPE_DEFAULTS_TTL`), else the config's.

        Raises
        ------
        InvalidActivityError
            If the payload or metadata cannot be stored: see
            :func:`runnerq_fast.codec.encode_payload` for the accepted values;
            either is capped at ``max_payload_bytes``.
        """
        return self._build(new_activity_id())

    def _build(self, activity_id: str) -> NewActivity:
        """:meth:`build` with the id given (a batch makes its ids at once)."""
        ex = self._executor
        cfg = ex.config
        if self._run_at is not None:
            run_at_ms = int(self._run_at * 1000)
        elif self._delay > 0:
            run_at_ms = int((time.time() + self._delay) * 1000)
        else:
            run_at_ms = 0
        max_bytes = cfg.max_payload_bytes
        priority, retries, timeout = self._priority, self._max_retries, self._timeout
        if priority is None or retries is None or timeout is None:  # the type's defaults (_type_defaults_of, inlined)
            local = ex.local_defaults
            typed = local.get(self.activity_type) if local else None
            if typed is None:
                entry = ex._typedefs.get(ex.queue_name)
                if entry is not None and entry[1]:
                    typed = entry[1].get(self.activity_type)
            if typed is not None:
                if priority is None:
                    priority = typed.priority
                if retries is None:
                    retries = typed.max_retries
                if timeout is None and typed.timeout_ms is not None:
                    timeout = typed.timeout_ms / 1000
        return NewActivity(
            activity_id,
            self.activity_type,
            encode_payload(self._payload, max_bytes),
            _NORMAL if priority is None else priority,
            cfg.default_max_retries if retries is None else retries,
            round((cfg.default_timeout if timeout is None else timeout) * 1000),
            run_at_ms,
            _ENCODED_EMPTY
            if self._metadata is None and (ex.inherited_metadata is None or not self._inherit)
            else self._encoded_metadata(max_bytes),
            self._idem_key,
            int(self._on_duplicate),
            round(cfg.idempotency_ttl * 1000),
            ex.parent_id,
        )

    async def execute(self, *, connection: object | None = None) -> ActivityFuture:
        """Enqueue the activity.

        Through ``ctx.executor`` of an ``async def`` handler, a call whose
        coroutine is never awaited (nor handed to a task) fails the attempt
        once the handler returns, instead of silently creating no child.

        Parameters
        ----------
        connection : asyncpg.Connection or sqlite3.Connection, optional
            Enqueue inside the caller's open transaction on this connection
            (the outbox pattern): the activity exists if and only if that
            transaction commits, and workers are woken when it commits.
            PostgreSQL takes an asyncpg connection (or a pool's) to the same
            database, SQLite a ``sqlite3.Connection`` to the same file; see
            the backend's ``enqueue``. Default: the backend's own transaction.

        Returns
        -------
        ActivityFuture

        Raises
        ------
        InvalidActivityError
            Bad input; nothing was stored.
        DuplicateActivityError
            The idempotency key is taken and the behaviour is ``NO_REUSE``.
        ConfigError
            ``connection`` is given to a backend that cannot use it (memory,
            Redis), is of the wrong kind, or is not inside a transaction.
        BackendError
            The store is unreachable or failed (the driver's exception is the
            ``__cause__``). Retried first only when it failed before the
            request was sent, so the activity was not stored then; a
            connection lost mid-request is not retried and the activity may
            have been stored (README, "When the store fails").
        """
        ex = self._executor
        entry = ex._typedefs.get(ex.queue_name)
        if entry is None or entry[0] <= time.monotonic():
            await ex.type_defaults()
        item = self.build()
        (res,) = await ex.backend.enqueue(ex.queue_name, [item], connection=connection)
        if ex.metrics is not None:
            ex._count((item,), (res,))
        return ex._future(item, res)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class ActivityExecutor:
    """Enqueues activities on one queue of one backend.

    Usable on its own (an API process that only enqueues) or as
    ``engine.executor`` / ``ctx.executor`` inside handlers.

    Parameters
    ----------
    backend : Backend
        Where activities are stored.
    queue_name : str, optional
        Queue to enqueue to; default ``config.queue_name``. Raises
        :class:`InvalidActivityError` if blank, over 255 characters or holding NUL.
    config : WorkerConfig, optional
        Defaults for timeout, retries, payload limit and idempotency TTL.
    metrics : LabelledMetricsSink, optional
        Counts every stored activity in ``runnerq_activities_enqueued_total``
        (queue, activity type). Default ``None``: nothing is counted.

    Attributes
    ----------
    parent_id : str or None
        The running activity whose handler enqueues through this executor
        (set on the one a context hands out, see :meth:`child`), else ``None``.
    inherited_metadata : mapping, bytes, str or None
        Metadata every activity this executor enqueues starts from (the
        parent's; a mapping, or JSON as stored), else ``None``.
    local_defaults : dict of str to TypeDefaults
        Per-type defaults known here, used before the store's (an engine's
        executor holds its own handlers' options); empty by default.
    """

    parent_id: str | None = None
    inherited_metadata: Mapping[str, str] | bytes | str | None = None
    #: the enqueue coroutines made through this executor, kept to find those never awaited: a list on the
    #: executor of an ``async def`` handler's context (a :class:`_HandlerExecutor`), else ``None``
    _issued: list[tuple[Coroutine[Any, Any, Any], str]] | None = None

    def __init__(
        self,
        backend: Backend,
        queue_name: str | None = None,
        config: WorkerConfig | None = None,
        *,
        metrics: LabelledMetricsSink | None = None,
    ) -> None:
        self.backend = backend
        self.config = config or WorkerConfig()
        self.queue_name = validate_queue_name(self.config.queue_name if queue_name is None else queue_name)
        self.metrics = metrics
        self.local_defaults: dict[str, TypeDefaults] = {}
        # the store's per-type defaults as last read, shared by every executor of this backend:
        # queue -> (monotonic time they go stale, defaults by type)
        cache = backend._type_defaults_cache
        if cache is None:
            cache = backend._type_defaults_cache = {}
        self._typedefs = cache

    # ------------------------------------------------------------- per-type defaults
    def _defaults_stale(self) -> bool:
        """Whether the store's per-type defaults of this queue are unread or older than :data:`TYPE_DEFAULTS_TTL`."""
        entry = self._typedefs.get(self.queue_name)
        return entry is None or entry[0] <= time.monotonic()

    def _type_defaults_of(self, activity_type: str) -> TypeDefaults | None:
        """The defaults of ``activity_type``: this executor's own, else the store's as last read, else ``None``."""
        local = self.local_defaults
        if local:
            own = local.get(activity_type)
            if own is not None:
                return own
        entry = self._typedefs.get(self.queue_name)
        return None if entry is None else entry[1].get(activity_type)

    async def type_defaults(self) -> dict[str, TypeDefaults]:
        """The per-type enqueue defaults this executor applies, by type; read from the store when stale.

        The store's entries (written by each started engine for its handlers:
        ``@engine.activity(..., max_retries=, timeout=, priority=)``) are read
        at most once per :data:`TYPE_DEFAULTS_TTL` seconds per backend and
        queue; :attr:`local_defaults` are laid over them. Every enqueue of a
        type applies them to the options it does not set itself.

        Raises
        ------
        BackendError
            The store is unreachable or failed.
        """
        if self._defaults_stale():
            stored = await self.backend.get_type_defaults(self.queue_name)
            self._typedefs[self.queue_name] = (time.monotonic() + TYPE_DEFAULTS_TTL, stored)
        return {**self._typedefs[self.queue_name][1], **self.local_defaults}

    def _count(self, items: Sequence[NewActivity], results: Sequence[EnqueueResult]) -> None:
        """Count the created activities of a stored batch by type (metrics on only)."""
        assert self.metrics is not None
        counts: dict[str, int] = {}
        for item, res in zip(items, results, strict=True):
            if res.outcome == EnqueueOutcome.CREATED:
                counts[item.activity_type] = counts.get(item.activity_type, 0) + 1
        for activity_type, n in counts.items():
            self.metrics.count(ACTIVITIES_ENQUEUED, (self.queue_name, activity_type), n)

    def child(self, parent_id: str, metadata: Mapping[str, str] | bytes | str | None = None) -> ActivityExecutor:
        """This executor for the handler of ``parent_id``: what it enqueues records it and inherits ``metadata``.

        Parameters
        ----------
        parent_id : str
            Id of the running activity.
        metadata : mapping of str to str, bytes, str or None
            The parent's metadata: a mapping (read at each enqueue, so keys
            added later are inherited too) or its stored JSON object.

        Returns
        -------
        ActivityExecutor
            A copy sharing the backend, queue and config. Called outside any
            running event loop (the thread of a plain ``def`` handler) while
            the backend's own loop runs in another thread, a
            :class:`BlockingExecutor`: its ``execute()`` enqueues without
            ``await``.
        """
        ex = copy.copy(self)
        ex.parent_id = parent_id
        ex.inherited_metadata = metadata
        home = self.backend._home_loop
        if home is not None and _running_loop() is None and home.is_running():
            return BlockingExecutor(ex, home)
        if type(ex) is ActivityExecutor:
            return _HandlerExecutor(ex)
        return ex

    def unawaited(self) -> list[tuple[Coroutine[Any, Any, Any], str]]:
        """The enqueues made through this (child) executor whose coroutine has not started: never awaited.

        Each as (its coroutine, what it enqueues: ``activity 'type'`` or ``enqueue_many``).

        A coroutine handed to a task that has not run yet counts too: the
        engine lets the loop run once before it asks (see
        :meth:`~runnerq_fast.engine.outcomes.Outcomes.dropped`).
        """
        issued = self._issued
        if not issued:
            return []
        left = [c for c in issued if inspect.getcoroutinestate(c[0]) == inspect.CORO_CREATED]
        issued[:] = left
        return left

    @overload
    def activity(self, activity_type: str) -> ActivityBuilder[Any]: ...

    @overload
    def activity(self, activity_type: Callable[[PayloadT, Any], object]) -> ActivityBuilder[PayloadT]: ...

    def activity(self, activity_type: str | Callable[..., object]) -> ActivityBuilder[Any]:
        """Start describing an activity of ``activity_type``.

        Parameters
        ----------
        activity_type : str or handler
            The type's name, or a handler registered for it with
            ``@engine.activity(name)`` in this process: the builder's
            :meth:`~ActivityBuilder.payload` then takes the handler's payload
            type, which a type checker (mypy) checks at the call.

        Raises
        ------
        InvalidActivityError
            If the type is empty, over 255 characters or not a string, or the
            handler is not registered (or registered for several types).
        """
        return ActivityBuilder(self, activity_type)

    def _future(self, item: NewActivity, res: EnqueueResult) -> ActivityFuture:
        if res.outcome == EnqueueOutcome.REJECTED:
            raise DuplicateActivityError(item.idempotency_key or "", res.activity_id)
        return ActivityFuture(self.backend, res.activity_id, res.outcome == EnqueueOutcome.CREATED)

    async def enqueue_many(
        self, items: Iterable[ActivityBuilder | tuple[str, Any]], *, connection: object | None = None
    ) -> list[str]:
        """Enqueue a batch in one backend round trip (in order, in smaller ones if the store cancels it).

        Never awaited through ``ctx.executor`` of an ``async def`` handler, it
        fails the attempt as :meth:`ActivityBuilder.execute` does.

        A batch the store cancels (PostgreSQL's ``statement_timeout``, a SQLite
        database locked past its busy timeout; nothing of it was applied) is
        sent again in halves, in input order, down to one activity at a time
        (:func:`enqueue_in_pieces`). With ``connection`` it is neither split
        nor retried: the cancel aborted the caller's transaction, and the
        driver's error (``asyncpg.QueryCanceledError``, ``sqlite3.OperationalError``)
        is raised as for any statement of the caller's.

        Parameters
        ----------
        items : iterable of ActivityBuilder or (activity_type, payload)
            Builders carry every option; tuples use the defaults.
        connection : asyncpg.Connection or sqlite3.Connection, optional
            Enqueue inside the caller's open transaction on this connection;
            see :meth:`ActivityBuilder.execute`.

        Returns
        -------
        list of str
            The activity ids, in input order (an existing id where an
            idempotency key matched).

        Raises
        ------
        InvalidActivityError
            If any item is invalid; nothing of the batch is stored.
        DuplicateActivityError
            If an item's ``NO_REUSE`` key is taken (the other items are stored).
        ConfigError
            If ``connection`` cannot be used (see :meth:`ActivityBuilder.execute`).
        BackendError
            If the store is unreachable or failed (see :meth:`ActivityBuilder.execute`).
            After the batch was split, the items stored before the piece that
            failed are in its :attr:`~runnerq_fast.errors.BackendError.enqueued`
            (a prefix of the input). :class:`~runnerq_fast.errors.StoreBusyError`
            if even one activity was cancelled for the backend's ``retry_timeout``.
        """
        built, results = await self._enqueue_all(items, connection)
        rejected = EnqueueOutcome.REJECTED
        for item, res in zip(built, results, strict=True):
            if res.outcome == rejected:
                raise DuplicateActivityError(item.idempotency_key or "", res.activity_id)
        return [res.activity_id for res in results]

    async def _enqueue_all(
        self, items: Iterable[ActivityBuilder | tuple[str, Any]], connection: object | None
    ) -> tuple[list[NewActivity], list[EnqueueResult]]:
        """Build a batch, store it in one backend call and count it: (built items, their results), empty for none."""
        if self._defaults_stale():
            await self.type_defaults()
        built = self._build_all(items)
        if not built:
            return [], []
        if connection is not None:  # the caller's transaction, aborted by a cancel: never split nor retried
            results = await self.backend.enqueue(self.queue_name, built, connection=connection)
        else:
            results = []
            try:
                await enqueue_in_pieces(self.backend, self.queue_name, built, results)
            except BaseException:
                if self.metrics is not None and results:  # the leading pieces were stored
                    self._count(built[: len(results)], results)
                raise
        if self.metrics is not None:
            self._count(built, results)
        return built, results

    def _build_all(self, items: Iterable[ActivityBuilder | tuple[str, Any]]) -> list[NewActivity]:
        """Build every item of a batch (see :meth:`enqueue_many`); ids made at once.

        A tuple item gets the defaults without going through a builder: its
        type is validated once per distinct type, a payload object met again
        (the same object) is not encoded again, and the metadata (none of its
        own, maybe the parent's) is encoded once per batch.
        """
        seq = items if isinstance(items, list | tuple) else list(items)
        ids = new_activity_ids(len(seq))
        built: list[NewActivity] = []
        append = built.append
        defaults: tuple[int, int, bytes, int, str | None] | None = None
        max_bytes = self.config.max_payload_bytes
        types: set[str] = set()
        last_payload: Any = _NOTHING
        data = b""
        entry = self._typedefs.get(self.queue_name)
        typed = bool(self.local_defaults) or (entry is not None and bool(entry[1]))  # any type has defaults
        for i, it in enumerate(seq):
            if isinstance(it, ActivityBuilder):
                append(it._build(ids[i]))
            elif isinstance(it, tuple) and len(it) == 2:
                activity_type, payload = it
                if type(activity_type) is not str or activity_type not in types:
                    types.add(validate_activity_type(activity_type))
                if payload is not last_payload:  # encoding has no side effects: the same object, the same bytes
                    data = encode_payload(payload, max_bytes)
                    last_payload = payload
                if defaults is None:
                    defaults = self._tuple_defaults()
                retries, timeout_ms, metadata, ttl_ms, parent_id = defaults
                priority = _NORMAL
                if typed and (own := self._type_defaults_of(activity_type)) is not None:
                    if own.priority is not None:
                        priority = own.priority
                    if own.max_retries is not None:
                        retries = own.max_retries
                    if own.timeout_ms is not None:
                        timeout_ms = own.timeout_ms
                append(
                    NewActivity(
                        ids[i], activity_type, data, priority, retries, timeout_ms, 0, metadata, None,
                        _RETURN_EXISTING, ttl_ms, parent_id,
                    )
                )
            else:
                raise InvalidActivityError(
                    f"item {i} of the batch is {type(it).__name__}: give an ActivityBuilder or an "
                    "(activity_type, payload) tuple"
                )
        return built

    def _tuple_defaults(self) -> tuple[int, int, bytes, int, str | None]:
        """Max retries, timeout (ms), encoded metadata, idempotency TTL (ms), parent id of an item with no options."""
        cfg = self.config
        meta = _ENCODED_EMPTY if self.inherited_metadata is None else ActivityBuilder(self, "_")._encoded_metadata(
            cfg.max_payload_bytes
        )
        return (
            cfg.default_max_retries,
            round(cfg.default_timeout * 1000),
            meta,
            round(cfg.idempotency_ttl * 1000),
            self.parent_id,
        )

    async def enqueue_many_futures(
        self, items: Iterable[ActivityBuilder | tuple[str, Any]], *, connection: object | None = None
    ) -> list[ActivityFuture]:
        """Like :meth:`enqueue_many` (builders or ``(activity_type, payload)`` tuples) but returns futures."""
        built, results = await self._enqueue_all(items, connection)
        return [self._future(item, res) for item, res in zip(built, results, strict=True)]

    async def cancel(self, activity_id: str) -> bool:
        """Cancel an activity that has not started; ``True`` if it was."""
        return await self.backend.cancel(activity_id)

    def future(self, activity_id: str) -> ActivityFuture:
        """A future for an activity enqueued earlier (e.g. by another process).

        Raises
        ------
        TypeError
            If ``activity_id`` is not a string (a future passed where its id belongs, say).
        """
        if not isinstance(activity_id, str):
            raise TypeError(f"an activity id is a str, got {type(activity_id).__name__}: {activity_id!r}")
        return ActivityFuture(self.backend, activity_id, False)

    async def get_result(self, activity_id: str) -> ActivityResult | None:
        """The stored outcome of an activity, or ``None`` if it is not finished."""
        return await self.backend.get_result(activity_id)


class BlockingBuilder(ActivityBuilder[PayloadT]):
    """The builder of a :class:`BlockingExecutor`: :meth:`execute` enqueues and returns without ``await``."""

    __slots__ = ()

    _executor: BlockingExecutor

    def execute(self, *, connection: object | None = None) -> str:  # type: ignore[override]
        """Enqueue the activity, blocking until the store has it; return its id.

        The same parent link, metadata inheritance, per-type defaults and
        errors as :meth:`ActivityBuilder.execute` (the enqueue runs on the
        engine's event loop while this thread waits).

        Returns
        -------
        str
            The activity id (the existing one when an idempotency key matched).

        Raises
        ------
        RuntimeError
            Called from a running event loop (use ``await`` and the async executor there).
        """
        future: ActivityFuture = self._executor._block(ActivityBuilder.execute(self, connection=connection))
        return future.activity_id


class BlockingExecutor(ActivityExecutor):
    """``ctx.executor`` in a plain ``def`` handler: enqueues without ``await`` (the sync client's shape).

    A plain ``def`` handler runs in the engine's thread pool, where an
    ``async`` executor's ``execute()`` would only make a coroutine that nobody
    awaits (the child silently never created). This executor runs each call
    on the engine's event loop (:func:`asyncio.run_coroutine_threadsafe`) and
    blocks the handler's thread until the store answered: the child records
    the running activity as its parent and inherits its metadata as from an
    ``async def`` handler.

    Parameters
    ----------
    executor : ActivityExecutor
        The handler's executor (parent link and metadata already set).
    loop : asyncio.AbstractEventLoop
        The loop the backend lives in (running in another thread).

    Examples
    --------
    >>> @engine.activity("report")
    ... def report(payload, ctx):
    ...     child_id = ctx.executor.activity("send").payload({"to": "a@b.c"}).execute()
    """

    def __init__(self, executor: ActivityExecutor, loop: asyncio.AbstractEventLoop) -> None:
        self.__dict__.update(executor.__dict__)
        self._loop = loop
        self._issued = None  # every call blocks until done: nothing can be left unawaited

    def _block(self, coro: Any) -> Any:
        """Run ``coro`` on the backend's loop and wait for it here (never from a running loop)."""
        if _running_loop() is not None:
            coro.close()
            raise RuntimeError(
                "a BlockingExecutor (ctx.executor of a plain def handler) cannot be called from a running event "
                "loop; use an async def handler and await its executor"
            )
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def child(self, parent_id: str, metadata: Mapping[str, str] | bytes | str | None = None) -> ActivityExecutor:
        """See :meth:`ActivityExecutor.child` (a blocking one again)."""
        ex = copy.copy(self)
        ex.parent_id = parent_id
        ex.inherited_metadata = metadata
        return ex

    @overload
    def activity(self, activity_type: str) -> BlockingBuilder[Any]: ...

    @overload
    def activity(self, activity_type: Callable[[PayloadT, Any], object]) -> BlockingBuilder[PayloadT]: ...

    def activity(self, activity_type: str | Callable[..., object]) -> BlockingBuilder[Any]:
        """Start describing an activity of ``activity_type`` (a name or a registered handler, as
        :meth:`ActivityExecutor.activity`); finish with a blocking ``.execute()``."""
        return BlockingBuilder(self, activity_type)

    def enqueue_many(  # type: ignore[override]
        self, items: Iterable[ActivityBuilder | tuple[str, Any]], *, connection: object | None = None
    ) -> list[str]:
        """Blocking :meth:`ActivityExecutor.enqueue_many`: the ids, in input order."""
        result: list[str] = self._block(ActivityExecutor.enqueue_many(self, items, connection=connection))
        return result

    def enqueue_many_futures(  # type: ignore[override]
        self, items: Iterable[ActivityBuilder | tuple[str, Any]], *, connection: object | None = None
    ) -> list[ActivityFuture]:
        """Blocking :meth:`ActivityExecutor.enqueue_many_futures` (their ``result()`` is awaited from async code)."""
        result: list[ActivityFuture] = self._block(
            ActivityExecutor.enqueue_many_futures(self, items, connection=connection))
        return result

    def cancel(self, activity_id: str) -> bool:  # type: ignore[override]
        """Blocking :meth:`ActivityExecutor.cancel`."""
        done: bool = self._block(ActivityExecutor.cancel(self, activity_id))
        return done

    def get_result(self, activity_id: str) -> ActivityResult | None:  # type: ignore[override]
        """Blocking :meth:`ActivityExecutor.get_result`."""
        res: ActivityResult | None = self._block(ActivityExecutor.get_result(self, activity_id))
        return res


class _TrackedBuilder(ActivityBuilder[PayloadT]):
    """The builder of an ``async def`` handler's ``ctx.executor``: records each :meth:`execute` coroutine."""

    __slots__ = ()

    _executor: _HandlerExecutor

    def execute(self, *, connection: object | None = None) -> Coroutine[Any, Any, ActivityFuture]:
        """See :meth:`ActivityBuilder.execute` (kept until the handler returns, to find it if never awaited)."""
        coro = ActivityBuilder.execute(self, connection=connection)
        self._executor._issued.append((coro, f"activity {self.activity_type!r}"))
        return coro


class _HandlerExecutor(ActivityExecutor):
    """``ctx.executor`` of an ``async def`` handler: the enqueue coroutines it makes are kept.

    When the handler returns, the engine asks :meth:`unawaited` for those that
    never started (:meth:`~runnerq_fast.engine.outcomes.Outcomes.dropped`):
    the attempt then fails instead of silently creating no child.
    """

    _issued: list[tuple[Coroutine[Any, Any, Any], str]]

    def __init__(self, executor: ActivityExecutor) -> None:
        self.__dict__.update(executor.__dict__)
        self._issued = []

    def child(self, parent_id: str, metadata: Mapping[str, str] | bytes | str | None = None) -> ActivityExecutor:
        """See :meth:`ActivityExecutor.child`."""
        ex = _HandlerExecutor(self)
        ex.parent_id = parent_id
        ex.inherited_metadata = metadata
        return ex

    @overload
    def activity(self, activity_type: str) -> ActivityBuilder[Any]: ...

    @overload
    def activity(self, activity_type: Callable[[PayloadT, Any], object]) -> ActivityBuilder[PayloadT]: ...

    def activity(self, activity_type: str | Callable[..., object]) -> ActivityBuilder[Any]:
        """See :meth:`ActivityExecutor.activity`."""
        return _TrackedBuilder(self, activity_type)

    def enqueue_many(
        self, items: Iterable[ActivityBuilder | tuple[str, Any]], *, connection: object | None = None
    ) -> Coroutine[Any, Any, list[str]]:
        """See :meth:`ActivityExecutor.enqueue_many` (kept until the handler returns, to find it if never awaited)."""
        coro = ActivityExecutor.enqueue_many(self, items, connection=connection)
        self._issued.append((coro, "enqueue_many"))
        return coro
