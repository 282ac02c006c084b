"""Activity ids: time-ordered UUIDs (RFC 9562 version 7).

Layout (128 bits): 48-bit Unix time in milliseconds, version ``0b0111``,
a 12-bit counter that keeps ids from one process strictly increasing within a
millisecond (RFC 9562 §6.2, method 1), variant ``0b10``, 62 random bits.

Time order matters for speed: consecutive ids land on the same B-tree leaf
pages of the primary key and the events index instead of random ones, and
"newest first" is an index-order scan.
"""

from __future__ import annotations

import random
import time

__all__ = ["new_activity_id"]

_rand = random.getrandbits  # ids need uniqueness, not secrecy
_last_ms = 0
_counter = 0


def new_activity_id() -> str:
    """A new UUIDv7 as 32 lowercase hex characters (no dashes).

    Ids from one process are strictly increasing; the counter borrows the next
    millisecond after 4096 ids in one millisecond, so order never breaks.
    """
    global _last_ms, _counter
    ms = time.time_ns() // 1_000_000
    if ms > _last_ms:
        _last_ms = ms
        _counter = 0
    else:
        _counter += 1
        if _counter > 0xFFF:
            _last_ms += 1
            _counter = 0
    hi = (_last_ms << 16) | 0x7000 | _counter
    lo = 0x8000000000000000 | _rand(62)
    return f"{hi:016x}{lo:016x}"
