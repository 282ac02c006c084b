"""What a handler receives besides its payload: the pure-Python reference twin.

:mod:`runnerq_fast.engine.context` selects the compiled twin
(``src_pyx/runnerq_fast/engine/_context.pyx``, a C type whose fields the
compiled worker sets directly) when it is built; both have the same
constructor, attributes, properties and ``repr``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from runnerq_fast.codec import decode_json
from runnerq_fast.progress import Progress, encode_progress

if TYPE_CHECKING:
    from runnerq_fast.engine.progress import ProgressBuffer
    from runnerq_fast.executor import ActivityExecutor
    from runnerq_fast.models import ClaimedActivity

__all__ = ["ActivityContext"]


class ActivityContext:
    """Per-attempt context passed to every handler as its second argument.

    The activity's own fields (:attr:`activity_id`, :attr:`activity_type`,
    :attr:`retry_count`, :attr:`max_retries`, :attr:`priority`,
    :attr:`enqueued_at`) are read-only properties, read from the claimed
    activity when asked for.

    Attributes
    ----------
    cancellation : asyncio.Event
        Set when the engine begins to shut down; a long handler may check
        :attr:`is_cancelled` and return early (it is cancelled anyway once
        ``shutdown_grace`` has passed).
    cancel_requested : bool
        Set when an operator cancelled this running activity (the engine
        learns it on its next lease heartbeat). An ``async def`` handler is
        cancelled as well; a plain ``def`` one cannot be interrupted and
        should check this flag and return. Either way the activity ends
        ``cancelled``.
    lease_lost : bool
        Set when the engine learns (on a lease heartbeat) that this attempt's
        lease was lost: it expired (the worker stalled or was cut off from the
        store for longer than ``lease_timeout``) and the activity was taken
        back, so it may already run elsewhere. An ``async def`` handler is
        cancelled as well and nothing is acknowledged for it; a plain ``def``
        one cannot be interrupted and should check this flag and return. Any
        ack it still produces is rejected by the store (the claim no longer
        holds) and counted in the engine's ``stats["rejected"]``.
    """

    __slots__ = (
        "_activity",
        "_cancel_sent",
        "_child_executor",
        "_executor",
        "_last_progress",
        "_metadata",
        "_progress",
        "cancel_requested",
        "cancellation",
        "lease_lost",
        "task",
    )

    def __init__(
        self,
        activity: ClaimedActivity,
        executor: ActivityExecutor,
        cancellation: asyncio.Event,
        progress: ProgressBuffer | None = None,
    ) -> None:
        self._activity = activity
        self._progress = progress  # where set_progress's values go (the engine's buffer); None: kept here only
        self._executor = executor
        self._child_executor: ActivityExecutor | None = None
        self.cancellation = cancellation
        self.cancel_requested = False
        self.lease_lost = False
        #: the task awaiting the handler (set by the engine for the attempt; ``None`` outside one)
        self.task: asyncio.Task[Any] | None = None
        self._cancel_sent = False
        self._metadata: dict[str, str] | None = None

    @property
    def activity_id(self) -> str:
        """Id of the running activity."""
        return self._activity.id

    @property
    def activity_type(self) -> str:
        """Its type."""
        return self._activity.activity_type

    @property
    def retry_count(self) -> int:
        """Retries made before this attempt (0 on the first run)."""
        return self._activity.retry_count

    @property
    def max_retries(self) -> int:
        """Retries allowed after the first attempt."""
        return self._activity.max_retries

    @property
    def priority(self) -> int:
        """1-4."""
        return self._activity.priority

    @property
    def enqueued_at(self) -> float:
        """Creation time, epoch **seconds**."""
        return self._activity.created_at_ms / 1000.0

    @property
    def executor(self) -> ActivityExecutor:
        """Enqueues child activities on the same queue: each records this activity as its parent and
        inherits its metadata.

        A child's metadata is this activity's :attr:`metadata` (keys the
        handler added to that dict included) updated with what the child sets
        itself (``.metadata({...})``; ``.metadata({...}, inherit=False)``
        replaces it instead). Made on first use, so a handler that enqueues
        nothing pays nothing.
        """
        child = self._child_executor
        if child is None:
            inherited = self._activity.metadata if self._metadata is None else self._metadata
            child = self._child_executor = self._executor.child(self.activity_id, inherited)
        return child

    @property
    def metadata(self) -> dict[str, str]:
        """The activity's metadata (decoded on first access); child activities inherit this dict."""
        if self._metadata is None:
            raw = self._activity.metadata
            decoded: Any = decode_json(raw) if raw and raw not in (b"{}", "{}") else {}
            self._metadata = decoded if isinstance(decoded, dict) else {}
            if self._child_executor is not None:
                self._child_executor.inherited_metadata = self._metadata
        return self._metadata

    def set_progress(self, value: Progress) -> None:
        """Report how far this attempt got: stored with the activity, shown by ``inspect``, the HTTP API,
        the console and the live event stream (a ``progress`` event).

        Cheap to call often, from ``async def`` and plain ``def`` handlers alike:
        the engine keeps only the latest value and writes it within
        :data:`~runnerq_fast.engine.progress.PROGRESS_INTERVAL` seconds (and
        before the attempt's outcome), under this attempt's claim, so a run
        whose lease was lost writes nothing.

        Parameters
        ----------
        value : float or dict
            A fraction done, from 0 to 1, or a JSON object (e.g.
            ``{"done": 40, "total": 120}``) of at most 8 KiB encoded.

        Raises
        ------
        ValueError
            If a fraction is NaN, infinite or outside [0, 1], or the dict is
            not plain JSON (:class:`~runnerq_fast.errors.InvalidActivityError`,
            naming the offending path) or over 8 KiB.
        TypeError
            If ``value`` is neither a number nor a dict.
        """
        raw = encode_progress(value)
        self._last_progress = value
        sink = self._progress
        if sink is not None:
            activity = self._activity
            sink.put(activity.id, activity.claim_token, raw)

    @property
    def progress(self) -> Progress | None:
        """The last value this attempt passed to :meth:`set_progress` (``None`` before the first)."""
        return getattr(self, "_last_progress", None)

    @property
    def is_cancelled(self) -> bool:
        """Whether the engine is shutting down."""
        return self.cancellation.is_set()

    def __repr__(self) -> str:
        return f"ActivityContext(id={self.activity_id!r}, type={self.activity_type!r}, retry={self.retry_count})"
