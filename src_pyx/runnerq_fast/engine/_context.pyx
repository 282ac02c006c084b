# cython: language_level=3
"""Compiled activity context (twin of ``runnerq_fast.engine._context_py``).

The same class as a C type: the same constructor, attributes, properties and
``repr``, and :func:`new_context` for the compiled worker, which fills a new
context's fields without a Python-level ``__init__`` call.
"""

from runnerq_fast._codec import decode_json
from runnerq_fast.progress import encode_progress

cdef object _decode_json = decode_json
cdef object _encode_progress = encode_progress


cdef class ActivityContext:
    """Per-attempt context passed to every handler as its second argument (see the reference twin)."""

    def __init__(self, activity, executor, cancellation, progress=None):
        _fill(self, activity, executor, cancellation, progress)

    @property
    def activity_id(self):
        """Id of the running activity."""
        return self._activity.id

    @property
    def activity_type(self):
        """Its type."""
        return self._activity.activity_type

    @property
    def retry_count(self):
        """Retries made before this attempt (0 on the first run)."""
        return self._activity.retry_count

    @property
    def max_retries(self):
        """Retries allowed after the first attempt."""
        return self._activity.max_retries

    @property
    def priority(self):
        """1-4."""
        return self._activity.priority

    @property
    def enqueued_at(self):
        """Creation time, epoch **seconds**."""
        return self._activity.created_at_ms / 1000.0

    @property
    def executor(self):
        """Enqueues child activities on the same queue: each records this activity as its parent and
        inherits its metadata (see the reference twin)."""
        child = self._child_executor
        if child is None:
            inherited = self._activity.metadata if self._metadata is None else self._metadata
            child = self._child_executor = self._executor.child(self.activity_id, inherited)
        return child

    @property
    def metadata(self):
        """The activity's metadata (decoded on first access); child activities inherit this dict."""
        if self._metadata is None:
            raw = self._activity.metadata
            decoded = _decode_json(raw) if raw and raw not in (b"{}", "{}") else {}
            self._metadata = decoded if isinstance(decoded, dict) else {}
            if self._child_executor is not None:
                self._child_executor.inherited_metadata = self._metadata
        return self._metadata

    def set_progress(self, value):
        """Report how far this attempt got (see the reference twin)."""
        raw = _encode_progress(value)
        self._last_progress = value
        sink = self._progress
        if sink is not None:
            activity = self._activity
            sink.put(activity.id, activity.claim_token, raw)

    @property
    def progress(self):
        """The last value this attempt passed to :meth:`set_progress` (``None`` before the first)."""
        return self._last_progress

    @property
    def is_cancelled(self):
        """Whether the engine is shutting down."""
        return self.cancellation.is_set()

    def __repr__(self):
        return f"ActivityContext(id={self.activity_id!r}, type={self.activity_type!r}, retry={self.retry_count})"


cdef inline void _fill(ActivityContext ctx, activity, executor, cancellation, progress) except *:
    ctx._activity = activity
    ctx._progress = progress
    ctx._executor = executor
    ctx._child_executor = None
    ctx.cancellation = cancellation
    ctx.cancel_requested = False
    ctx.lease_lost = False
    ctx.task = None
    ctx._cancel_sent = False
    ctx._metadata = None


cdef ActivityContext new_context(object activity, object executor, object cancellation, object progress):
    """A new context of ``activity``, as ``ActivityContext(activity, executor, cancellation, progress)`` makes it.

    ``_last_progress`` is not set: a new object's fields start ``None``."""
    cdef ActivityContext ctx = ActivityContext.__new__(ActivityContext)
    _fill(ctx, activity, executor, cancellation, progress)
    return ctx
