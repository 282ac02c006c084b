"""Exceptions raised by runnerq-fast.

Handler-facing errors (:class:`RetryableError`, :class:`NonRetryableError`)
decide what happens to a failed activity; caller-facing errors
(:class:`ActivityFailed`, :class:`ActivityCancelled`) are raised by
:meth:`ActivityFuture.result`; everything else reports misuse or a backend fault.
"""

from __future__ import annotations

__all__ = [
    "ActivityCancelled",
    "ActivityFailed",
    "BackendError",
    "ConfigError",
    "DuplicateActivityError",
    "EventLoopMismatchError",
    "InvalidActivityError",
    "NonRetryableError",
    "RetryableError",
    "RunnerQError",
    "StoreBusyError",
]


class RunnerQError(Exception):
    """Base class of every exception this package raises on purpose."""


class RetryableError(RunnerQError):
    """Raised by a handler: the attempt failed, try again after a backoff.

    Parameters
    ----------
    message : str
        Why the attempt failed; stored with the activity and its events.
    retry_after : float or None, optional
        Seconds to wait before the next attempt, overriding the exponential
        backoff for this retry only. ``None`` (default) uses the backoff.

    Notes
    -----
    Any exception that is not a :class:`NonRetryableError` is treated as
    retryable, so raising this class is only needed to set ``retry_after``
    or to make the intent explicit.
    """

    def __init__(self, message: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(message)
        if retry_after is not None and not 0 <= retry_after <= 3_155_760_000:  # 100 years, like a delay
            raise ValueError(f"retry_after must be within [0, 3155760000] seconds, got {retry_after!r}")
        self.retry_after = retry_after


class NonRetryableError(RunnerQError):
    """Raised by a handler: the activity can never succeed; mark it failed now."""


class ActivityFailed(RunnerQError):
    """The awaited activity ended as ``failed`` or ``dead_letter``.

    Attributes
    ----------
    activity_id : str
        The activity's id.
    status : str
        ``"failed"`` or ``"dead_letter"``.
    error : str or None
        The last error the handler (or the engine) recorded.
    traceback : str or None
        The traceback of the last attempt whose handler raised (see
        :attr:`~runnerq_fast.models.ActivitySnapshot.traceback`); ``None`` when
        no handler of it raised.
    """

    def __init__(self, activity_id: str, status: str, error: str | None, traceback: str | None = None) -> None:
        super().__init__(f"activity {activity_id} ended as {status}: {error}")
        self.activity_id = activity_id
        self.status = status
        self.error = error
        self.traceback = traceback


class ActivityCancelled(RunnerQError):
    """The awaited activity was cancelled before it completed."""

    def __init__(self, activity_id: str) -> None:
        super().__init__(f"activity {activity_id} was cancelled")
        self.activity_id = activity_id


class CorruptResultError(RunnerQError, ValueError):
    """The awaited activity completed, but its stored result does not decode.

    The store holds text that is not one valid JSON value: a row edited or
    damaged outside this library. The activity itself completed; only its
    return value is lost.

    Attributes
    ----------
    activity_id : str
        The activity's id.
    reason : str
        What the decoder reported.
    """

    def __init__(self, activity_id: str, reason: str) -> None:
        super().__init__(f"activity {activity_id} completed, but its stored result does not decode: {reason}")
        self.activity_id = activity_id
        self.reason = reason


class ConfigError(RunnerQError):
    """The engine or a backend was configured in a way that cannot work."""


class InvalidActivityError(RunnerQError, ValueError):
    """An activity was refused at enqueue; nothing was stored.

    Raised for a payload (or a result, metadata) that holds anything but the
    JSON types (so it would not arrive equal; the message names the path of
    the offending value), NaN or Infinity, a NUL character or a lone
    surrogate, or that exceeds ``max_payload_bytes``; for an empty, over-long
    or unencodable activity type, queue name or idempotency key; for a delay,
    retry count or timeout out of range; and for an unknown priority.
    """


class DuplicateActivityError(RunnerQError):
    """An idempotency key with ``OnDuplicate.NO_REUSE`` was already taken.

    Attributes
    ----------
    key : str
        The idempotency key.
    existing_id : str
        The id of the activity that holds the key.
    """

    def __init__(self, key: str, existing_id: str) -> None:
        super().__init__(f"idempotency key {key!r} is already used by activity {existing_id}")
        self.key = key
        self.existing_id = existing_id


class BackendError(RunnerQError):
    """A backend could not be reached or answered in a way it must not.

    Attributes
    ----------
    transient : bool
        ``True`` when the store gave no answer of its own to the request: it
        could not be reached, the connection failed while the request was in
        flight, or it cancelled the request (:class:`StoreBusyError`); the same
        request may succeed later. ``False`` (the default) for an answer the
        same request would get again (bad SQL, a value the store refuses) and
        for the backend's own refusals.
    enqueued : tuple of str
        Set on an error raised by a batch enqueue that the store cancelled
        and the producer sent again in pieces
        (:func:`~runnerq_fast.executor.enqueue_in_pieces`): the ids of the
        batch's leading items that were stored before the piece that failed,
        in input order (the rest were not sent, or were cancelled if the
        error is a :class:`StoreBusyError`). Empty otherwise.
    """

    transient: bool = False
    enqueued: tuple[str, ...] = ()


class StoreBusyError(BackendError):
    """The store cancelled or rolled back the request: nothing was applied, and it may succeed later.

    Raised after a few quick retries for a statement cancelled by PostgreSQL's
    ``statement_timeout`` (SQLSTATE 57014), a ``lock_timeout`` (55P03), an
    ``idle_in_transaction_session_timeout`` (25P03), a serialization failure
    or a deadlock (40001, 40P01), and a SQLite database locked by another
    writer past its busy timeout. The same request can succeed once the
    store is less busy or in smaller pieces: the worker engine keeps its
    acks and retries them in smaller batches, and its reaper and pruner
    halve their batch size (see :mod:`runnerq_fast.engine.batching`); a
    batch enqueue is sent again in halves, in order
    (:func:`~runnerq_fast.executor.enqueue_in_pieces`).
    A subclass of :class:`BackendError`, so existing handlers still catch it;
    :attr:`~BackendError.transient` is always ``True``.
    """

    transient = True


class EventLoopMismatchError(RunnerQError, RuntimeError):
    """A backend was used from an event loop other than the one it was opened in.

    Its connections, locks and background tasks belong to that loop (which
    may even be closed), so every backend refuses the call, the same way,
    before touching the store. Open one backend per event loop.
    """
