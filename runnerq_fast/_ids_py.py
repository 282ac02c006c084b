"""Activity ids, the pure-Python reference twin (see :mod:`runnerq_fast.ids` for the layout).

:mod:`runnerq_fast.ids` selects the compiled twin when it is built. An id
is built as text from parts, not formatted from integers (formatting two
64-bit integers was most of the 2.4 µs an enqueued activity cost the
client): the 48-bit time as 12 hex digits (formatted once per millisecond),
the version digit and counter from a table of the 4096 possible values, then
the random half as 16 hex digits whose first digit is one of ``89ab`` (the
variant bits and 2 random bits). :func:`new_activity_ids` makes a batch with
one clock read and one call for all its random bytes.
"""

from __future__ import annotations

import random
import time

__all__ = ["new_activity_id", "new_activity_ids"]

_COUNTERS = tuple(f"7{c:03x}" for c in range(4096))
"""Hex digits 13-16 of an id: the version digit and the 12-bit counter."""

_VARIANT = bytes(b"89ab"[b & 3] for b in range(256))
"""``bytes.translate`` table: any byte to a first digit of the random half (variant ``0b10`` + 2 bits)."""

_rand = random.getrandbits  # ids need uniqueness, not secrecy (and no system call per batch)

#: The (ms << 12 | counter) of the last id handed out.
_last_seq = 0
#: Hex of the millisecond of ``_last_seq`` (12 digits) and that millisecond.
_ms_hex = "000000000000"
_ms_of_hex = 0


def _ms_prefix(ms: int) -> str:
    global _ms_hex, _ms_of_hex
    if ms != _ms_of_hex:
        _ms_of_hex = ms
        _ms_hex = f"{ms:012x}"
    return _ms_hex


def _reserve(n: int) -> int:
    """Reserve ``n`` consecutive sequence numbers (ms << 12 | counter); return the first.

    A new millisecond starts at counter 0; within one millisecond the
    counter goes on from the last id, and past 4095 it borrows the next
    millisecond, so ids never go backwards.
    """
    global _last_seq
    now = (time.time_ns() // 1_000_000) << 12
    first = now if now > _last_seq else _last_seq + 1
    _last_seq = first + n - 1
    return first


def new_activity_id() -> str:
    """A new UUIDv7 as 32 lowercase hex characters (no dashes).

    Ids from one process are strictly increasing; the counter borrows the next
    millisecond after 4096 ids in one millisecond, so order never breaks.
    """
    seq = _reserve(1)
    return f"{_ms_prefix(seq >> 12)}{_COUNTERS[seq & 0xFFF]}{0x8000000000000000 | _rand(62):016x}"


def new_activity_ids(n: int) -> list[str]:
    """``n`` new ids, as :func:`new_activity_id` would make them one after the other.

    Parameters
    ----------
    n : int
        How many (0 or more).

    Returns
    -------
    list of str
        Strictly increasing ids, each 32 lowercase hex characters.
    """
    if n <= 0:
        return []
    seq = _reserve(n)
    rnd = _rand(64 * n).to_bytes(8 * n, "big").hex()  # 16 hex digits per id (the first is replaced)
    variants = _rand(8 * n).to_bytes(n, "big").translate(_VARIANT).decode()
    counters = _COUNTERS
    ids: list[str] = []
    append = ids.append
    ms = seq >> 12
    prefix = _ms_prefix(ms)
    c = seq & 0xFFF
    for i in range(n):
        if c > 0xFFF:
            ms += 1
            prefix = _ms_prefix(ms)
            c = 0
        j = 16 * i
        append(f"{prefix}{counters[c]}{variants[i]}{rnd[j + 1 : j + 16]}")
        c += 1
    return ids
