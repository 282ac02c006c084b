"""Activity ids: time-ordered UUIDs (RFC 9562 version 7), compiled when available.

Layout (128 bits): 48-bit Unix time in milliseconds, version ``0b0111``,
a 12-bit counter that keeps ids from one process strictly increasing within a
millisecond (RFC 9562 §6.2, method 1), variant ``0b10``, 62 random bits.
Past 4096 ids in one millisecond the counter borrows the next millisecond,
so order never breaks. Ids are 32 lowercase hex characters (no dashes).

Time order matters for speed: consecutive ids land on the same B-tree leaf
pages of the primary key and the events index instead of random ones, and
"newest first" is an index-order scan. A batch enqueue makes its ids with
:func:`new_activity_ids` (one clock read, one random draw).

See :mod:`runnerq_fast._ids_py` for the reference implementation and
:mod:`runnerq_fast.speedups` for how the implementation is chosen; each keeps
its own sequence, and only one is in use in a process.
"""

from __future__ import annotations

from runnerq_fast import speedups

if speedups.enabled:
    from runnerq_fast._ids import new_activity_id, new_activity_ids
else:
    from runnerq_fast._ids_py import new_activity_id, new_activity_ids

__all__ = ["new_activity_id", "new_activity_ids"]
