# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled core of the memory backend (twin of ``runnerq_fast.backends._memstore_py``).

The same code with typed rows and queue state: the claim and ack loops read
and write row fields as C struct members and call the event, finish and
heap helpers as C functions. Python callers see the same classes, attributes
and methods as the reference.
"""

cimport cython
from cpython.long cimport PyLong_AsUnsignedLongLongMask

import heapq
import itertools
from collections import deque

from runnerq_fast.backends._wakeups import WorkSignal
from runnerq_fast.backends.rowcheck import decode_metadata
from runnerq_fast.models import (
    READY_STATUSES,
    TERMINAL_STATUSES,
    AckOutcome,
    ActivityEvent,
    ActivityResult,
    ActivitySnapshot,
    ClaimedActivity,
)

cdef object _Event = ActivityEvent
cdef object _Result = ActivityResult
cdef object _Claimed = ClaimedActivity
cdef object _heappush = heapq.heappush
cdef object _heappop = heapq.heappop
cdef frozenset _READY = frozenset(READY_STATUSES)
cdef object _COMPLETED = AckOutcome.COMPLETED
cdef object _RETRY = AckOutcome.RETRY
cdef object _FAILED = AckOutcome.FAILED
cdef object _CANCELLED = AckOutcome.CANCELLED


cdef object _SEQ_MASK = (1 << 64) - 1


cdef inline object _ready_key(object priority, object retry_count, object ready_at_ms, object ordinal, object seq):
    """See the reference twin: (priority desc, retry desc, ready asc, ordinal asc, seq) as one integer."""
    return (((((((-priority) << 100) - retry_count) << 100) + ready_at_ms << 64) + ordinal) << 64) + seq


@cython.final
cdef class ReadyQueue:
    """The ready entries (key, activity id) of one activity type, smallest key first: a sorted run with
    its ids beside it, plus a heap of keys with their ids by seq (see the reference twin)."""

    cdef object run, run_ids
    cdef list heap
    cdef dict heap_ids
    cdef object last  # the last key appended to ``run``

    def __init__(self):
        self.run = deque()
        self.run_ids = deque()
        self.heap = []
        self.heap_ids = {}
        self.last = None

    def __len__(self):
        return len(self.run) + len(self.heap)

    cpdef push(self, key, activity_id):
        """Add the entry of ``activity_id`` under ``key`` (keys are unique)."""
        run = self.run
        if not run or key > self.last:
            run.append(key)
            self.run_ids.append(activity_id)
            self.last = key
        else:
            _heappush(self.heap, key)
            self.heap_ids[PyLong_AsUnsignedLongLongMask(key)] = activity_id

    cpdef peek(self):
        """The smallest key (the queue must not be empty)."""
        run = self.run
        if not self.heap:
            return run[0]
        if run and run[0] < self.heap[0]:
            return run[0]
        return self.heap[0]

    cdef object take(self, unsigned long long* seq):
        """Take the entry of the smallest key out: its activity id, its seq in ``seq[0]``."""
        run = self.run
        if not self.heap or (run and run[0] < self.heap[0]):
            seq[0] = PyLong_AsUnsignedLongLongMask(run.popleft())
            return self.run_ids.popleft()
        seq[0] = PyLong_AsUnsignedLongLongMask(_heappop(self.heap))
        return self.heap_ids.pop(seq[0])

    def pop(self):
        """Take the entry of the smallest key out: (its seq, its activity id) (the queue must not be empty)."""
        cdef unsigned long long seq
        activity_id = self.take(&seq)
        return seq, activity_id


@cython.no_gc
cdef class Row:
    """One stored activity (see the reference twin).

    Not tracked by the cyclic garbage collector: every field holds a str, int, bool, bytes or None, its
    events list (of untracked event structs) or its untracked result struct, so a row is never part of a
    reference cycle, and full collections need not visit every stored row.
    """

    cdef public object id, queue, activity_type, payload, priority, max_retries, timeout_ms, metadata
    cdef public object idempotency_key, retry_count, created_at_ms, ready_at_ms, status, claim_token
    cdef public object lease_expires_at_ms, started_at_ms, finished_at_ms, dead_lettered_at_ms
    cdef public object last_error, heap_seq, parent_id, cancel_requested, suspect
    cdef public object traceback  # the traceback of the last attempt whose handler raised
    cdef public object ordinal  # its creation order: the seq of its first push, kept when pushed again
    cdef public list events  # its events, oldest first
    cdef public object result  # its ActivityResult once finished, else None

    def __init__(self, queue, item, now):
        self.id = item.id
        self.queue = queue
        self.activity_type = item.activity_type
        self.payload = item.payload
        self.priority = item.priority
        self.max_retries = item.max_retries
        self.timeout_ms = item.timeout_ms
        self.metadata = item.metadata
        self.idempotency_key = item.idempotency_key
        self.retry_count = 0
        self.created_at_ms = now
        self.ready_at_ms = item.run_at_ms if item.run_at_ms > now else now
        self.status = "scheduled" if item.run_at_ms > now else "pending"
        self.claim_token = None
        self.lease_expires_at_ms = None
        self.started_at_ms = None
        self.finished_at_ms = None
        self.dead_lettered_at_ms = None
        self.last_error = None
        self.traceback = None
        self.heap_seq = 0
        self.ordinal = 0
        self.parent_id = item.parent_id
        self.cancel_requested = False
        self.suspect = False
        self.events = []
        self.result = None

    def snapshot(self):
        return ActivitySnapshot(
            id=self.id,
            queue=self.queue,
            activity_type=self.activity_type,
            status=self.status,
            priority=self.priority,
            payload=self.payload,
            metadata=decode_metadata(self.metadata),
            retry_count=self.retry_count,
            max_retries=self.max_retries,
            timeout_ms=self.timeout_ms,
            created_at_ms=self.created_at_ms,
            ready_at_ms=self.ready_at_ms,
            started_at_ms=self.started_at_ms,
            finished_at_ms=self.finished_at_ms,
            lease_expires_at_ms=self.lease_expires_at_ms if self.status == "processing" else None,
            last_error=self.last_error,
            idempotency_key=self.idempotency_key,
            parent_id=self.parent_id,
        )


cdef class QueueState:
    """Per-queue heaps, processing set, rows, recent events and wake event."""

    cdef public dict by_type, suspects, processing, rows, by_status, type_rows, children
    cdef public list scheduled, order, order_tail
    cdef public object events, wake
    cdef object events_append  # events.append, bound once

    def __init__(self):
        self.by_type = {}
        self.suspects = {}
        self.scheduled = []
        self.processing = {}
        self.rows = {}
        self.events = deque(maxlen=10_000)
        self.events_append = self.events.append
        self.wake = WorkSignal()  # set by work made ready, cleared per type by claims
        self.by_status = {s: {} for s in ("pending", "scheduled", "retrying", *TERMINAL_STATUSES)}
        self.by_status["processing"] = self.processing
        self.order = []
        self.order_tail = []
        self.type_rows = {}
        self.children = {}


cdef class StoreCore:
    """Rows, per-queue state, events and results, with the per-activity claim and ack loops."""

    cdef public dict _queues, _rows, _waiters, _subscribers
    cdef public object _seq
    cdef long long _last_event_id

    def __init__(self):
        self._queues = {}
        self._rows = {}
        self._waiters = {}
        self._subscribers = {}
        self._seq = itertools.count(1)
        self._last_event_id = 0

    # ---------------------------------------------------------- Python-visible helpers
    def _queue(self, name):
        q = self._queues.get(name)
        if q is None:
            q = self._queues[name] = QueueState()
        return q

    def _next_event_id(self):
        """The id of the next event (ids count from 1, one sequence for the whole store)."""
        self._last_event_id += 1
        return self._last_event_id

    def _event(self, Row row, event_type, now, detail=None):
        self._event_c(row, event_type, now, detail)

    def _push_ready(self, QueueState q, Row row):
        self._push_ready_c(q, row)

    def _push_scheduled(self, QueueState q, Row row):
        seq = next(self._seq)
        row.heap_seq = seq
        if row.ordinal == 0:
            row.ordinal = seq
        _heappush(q.scheduled, (row.ready_at_ms, seq, row.id))
        if q.scheduled[0][1] == seq:
            q.wake.set()  # a new earliest due time: waiting fetchers time their wait again

    def _make_ready(self, QueueState q, Row row, now):
        self._make_ready_c(q, row, now)

    def _finish(self, Row row, status, now, data, error):
        self._finish_c(<QueueState>self._queues[row.queue], row, status, now, data, error)

    def _move(self, QueueState q, Row row, status):
        self._move_c(q, row, status)

    def _held(self, ref_id, token):
        return self._held_c(ref_id, token)

    # ---------------------------------------------------------------- C helpers
    cdef void _event_c(self, Row row, str event_type, object now, object detail) except *:
        self._event_q(<QueueState>self._queues[row.queue], row, event_type, now, detail)

    cdef void _event_q(self, QueueState q, Row row, str event_type, object now, object detail) except *:
        """:meth:`_event_c` for a caller that holds ``row``'s queue state ``q`` already."""
        self._last_event_id += 1
        ev = _Event(self._last_event_id, row.id, row.queue, event_type, now, detail)
        row.events.append(ev)
        q.events_append(ev)
        if self._subscribers:
            subs = self._subscribers.get(row.queue)
            if subs:
                for s in subs:
                    s.put_nowait(ev)

    cdef void _failure_event_q(self, QueueState q, Row row, str event_type, object now, object detail,
                               object traceback) except *:
        """:meth:`_event_q` of a failed attempt: ``row``'s timeline keeps its ``traceback``; the
        queue's recent events and the live stream get the event without it."""
        if traceback is None:
            self._event_q(q, row, event_type, now, detail)
            return
        self._last_event_id += 1
        ev = _Event(self._last_event_id, row.id, row.queue, event_type, now, detail)
        row.events.append(_Event(self._last_event_id, row.id, row.queue, event_type, now, detail, traceback))
        q.events_append(ev)
        if self._subscribers:
            subs = self._subscribers.get(row.queue)
            if subs:
                for s in subs:
                    s.put_nowait(ev)

    cdef void _push_ready_c(self, QueueState q, Row row) except *:
        seq = next(self._seq)
        row.heap_seq = seq
        if row.ordinal == 0:
            row.ordinal = seq
        heaps = q.suspects if row.suspect else q.by_type
        found = heaps.get(row.activity_type)
        cdef ReadyQueue ready
        if found is None:
            ready = ReadyQueue()
            heaps[row.activity_type] = ready
        else:
            ready = <ReadyQueue>found
        ready.push(_ready_key(row.priority, row.retry_count, row.ready_at_ms, row.ordinal, seq), row.id)

    cdef void _make_ready_c(self, QueueState q, Row row, object now) except *:
        if row.ready_at_ms > now:
            self._push_scheduled(q, row)
        else:
            self._push_ready_c(q, row)
            q.wake.set()

    cdef void _move_c(self, QueueState q, Row row, str status) except *:
        # the status left is most often "processing" (an ack): its dict is at hand
        (q.processing if row.status == "processing" else <dict>q.by_status[row.status]).pop(row.id, None)
        (<dict>q.by_status[status])[row.id] = row
        row.status = status

    cdef void _finish_c(self, QueueState q, Row row, str status, object now, object data, object error) except *:
        """Move ``row`` (of queue state ``q``) to the final ``status`` and store its result."""
        self._move_c(q, row, status)
        row.finished_at_ms = now
        row.claim_token = None
        row.lease_expires_at_ms = None
        if error is not None:
            row.last_error = error
        # as the SQL backends' result: a failure's carries the last traceback (a completion's error is None)
        tb = row.traceback if error is not None and (status == "failed" or status == "dead_letter") else None
        res = _Result(row.id, status, data, error, tb)
        row.result = res
        waiters = self._waiters.pop(row.id, None)
        if waiters:
            for w in waiters:
                if not w.done():
                    w.set_result(res)

    cdef object _held_c(self, object ref_id, object token):
        found = self._rows.get(ref_id)
        if found is None:
            return None
        cdef Row row = <Row>found
        if row.status != "processing" or row.claim_token != token:
            return None
        return row

    # ------------------------------------------------------------------- loops
    def _claim_from(self, QueueState q, list heaps, Py_ssize_t limit, token, lease_until, now, worker_id):
        """Pop up to ``limit`` ready rows from ``heaps`` (non-empty ready queues; best first) and claim them."""
        cdef dict rows = self._rows
        cdef list out = []
        cdef ReadyQueue best
        cdef Row row
        cdef unsigned long long seq
        while heaps and len(out) < limit:
            best = <ReadyQueue>(heaps[0] if len(heaps) == 1 else min(heaps, key=_first))
            activity_id = best.take(&seq)
            if not best:
                heaps.remove(best)
            found = rows.get(activity_id)
            if found is None:
                continue
            row = <Row>found
            if PyLong_AsUnsignedLongLongMask(row.heap_seq) != seq or row.status not in _READY:
                continue
            (<dict>q.by_status[row.status]).pop(row.id, None)
            row.status = "processing"
            row.claim_token = token
            row.lease_expires_at_ms = lease_until
            row.started_at_ms = now
            q.processing[row.id] = row
            self._event_q(q, row, "claimed", now, worker_id)
            out.append(
                _Claimed(
                    row.id,
                    row.activity_type,
                    row.payload,
                    row.priority,
                    row.retry_count,
                    row.max_retries,
                    row.timeout_ms,
                    row.metadata,
                    token,
                    row.created_at_ms,
                    row.ready_at_ms,
                )
            )
        return out

    def _ack_batch(self, QueueState q, acks, now):
        """Apply ``acks``; return the ids whose claim is no longer held."""
        cdef list rejected = []
        cdef Row row
        cdef QueueState own = None  # the queue state of the row's queue (its events and final status)
        own_name = None
        for a in acks:
            found = self._held_c(a.id, a.claim_token)
            if found is None:
                rejected.append(a.id)
                continue
            row = <Row>found
            if row.queue is not own_name:  # the rows of one batch share their queue name: looked up once
                own_name = row.queue
                own = <QueueState>self._queues[own_name]
            row.suspect = False  # it ended normally: claimed the ordinary way from now on
            outcome = a.outcome
            if outcome == _COMPLETED:
                self._event_q(own, row, "completed", now, None)
                self._finish_c(own, row, "completed", now, a.result, None)
            elif outcome == _CANCELLED or (outcome == _RETRY and row.cancel_requested):
                # a retry of an activity an operator asked to cancel ends it instead
                if a.traceback is not None:
                    row.traceback = a.traceback
                self._event_q(own, row, "cancelled", now, None)
                self._finish_c(own, row, "cancelled", now, None, None)
            elif outcome == _RETRY:
                row.retry_count += 1
                row.ready_at_ms = max(a.retry_at_ms, now)
                row.claim_token = None
                row.lease_expires_at_ms = None
                row.last_error = a.error
                if a.traceback is not None:
                    row.traceback = a.traceback
                self._move_c(q, row, "retrying")
                self._failure_event_q(own, row, "retrying", now, a.error, a.traceback)
                self._make_ready_c(q, row, now)
            elif outcome == _FAILED:
                if a.traceback is not None:
                    row.traceback = a.traceback
                self._failure_event_q(own, row, "failed", now, a.error, a.traceback)
                self._finish_c(own, row, "failed", now, None, a.error)
            else:
                row.dead_lettered_at_ms = now
                if a.traceback is not None:
                    row.traceback = a.traceback
                self._failure_event_q(own, row, "dead_letter", now, a.error, a.traceback)
                self._finish_c(own, row, "dead_letter", now, None, a.error)
        return rejected


def _first(ReadyQueue h):
    return h.peek()
