"""Redis ready-set score: (priority, retry_count, ready time) in one double.

Pure-Python reference implementation; :mod:`runnerq_fast.backends.redis.scoring` selects the
compiled twin when it is built. The Redis Lua scripts compute the same value
(``backends/redis/lua/_score.lua``), and a test checks that both agree.

A Redis sorted set orders members by their score, a 64-bit IEEE-754 double,
ascending. The claim order of SPEC §3 is ``priority DESC, retry_count DESC,
ready_at ASC``. A double has only 53 bits of exact integer precision, too few
for all three fields at full width, but **the bit patterns of positive,
finite doubles sort in the same order as the doubles themselves**. So a 64-bit
unsigned *key* whose integer order is the claim order is built first, and the
score is the double whose bit pattern is that key.

Bit layout of the key (bit 63 is the most significant)::

    bit  63      0                       sign: always positive
    bits 60..62  priority rank + 1       1 (CRITICAL) .. 4 (LOW)
    bits 44..59  retry rank              65535 - min(retry_count, 65535)
    bits  0..43  ready time              epoch milliseconds, clamped to [0, 2**44 - 1]

* The key is always >= 2**60, so the exponent field is never 0: no zero or
  subnormal scores, which Redis' ``strtod`` treats specially.
* The key is always < 5 * 2**60 < 0x7FF0 << 48, so the exponent field is never
  all ones: no infinity or NaN.

Limits (where two activities may compare equal although the SPEC order would
separate them):

* retry counts above 65,535 compare as 65,535 (then by ready time);
* ready times before 1970-01-01 compare as 1970-01-01, and after
  2527-06-23 (2**44 ms) as that instant.

Within these limits, score order equals the SPEC order exactly; ties (same
priority, retry count and millisecond) are broken by the Redis member, the
activity id, whose UUIDv7 form sorts by creation time.
"""

from __future__ import annotations

import struct

__all__ = ["MAX_READY_MS", "MAX_RETRY_RANK", "decode_score", "encode_score"]

#: Largest ready time, in epoch milliseconds, that keeps its own score.
MAX_READY_MS = (1 << 44) - 1
#: Largest retry count that keeps its own score.
MAX_RETRY_RANK = (1 << 16) - 1

_KEY = struct.Struct(">Q")
_DOUBLE = struct.Struct(">d")


def encode_score(priority: int, retry_count: int, ready_ms: int) -> float:
    """Score of an activity in a Redis ready set.

    Parameters
    ----------
    priority : int
        1 (LOW) to 4 (CRITICAL).
    retry_count : int
        Retries made so far, >= 0; values above 65,535 saturate.
    ready_ms : int
        When the activity became ready (scheduled time, else creation time),
        in epoch **milliseconds**; clamped to ``[0, 2**44 - 1]``.

    Returns
    -------
    float
        A positive, finite double; a smaller score is claimed first.

    Raises
    ------
    ValueError
        If ``priority`` is not in 1..4 or ``retry_count`` is negative.
    """
    if priority < 1 or priority > 4:
        raise ValueError(f"priority must be 1..4, got {priority!r}")
    if retry_count < 0:
        raise ValueError(f"retry_count must be >= 0, got {retry_count!r}")
    retry_rank = MAX_RETRY_RANK - (retry_count if retry_count < MAX_RETRY_RANK else MAX_RETRY_RANK)
    ready = 0 if ready_ms < 0 else (ready_ms if ready_ms < MAX_READY_MS else MAX_READY_MS)
    key = ((5 - priority) << 60) | (retry_rank << 44) | ready
    return float(_DOUBLE.unpack(_KEY.pack(key))[0])


def decode_score(score: float) -> tuple[int, int, int]:
    """Inverse of :func:`encode_score`.

    Parameters
    ----------
    score : float
        A score made by :func:`encode_score`.

    Returns
    -------
    tuple of (int, int, int)
        ``(priority, retry_count, ready_ms)``, with the saturation and
        clamping of :func:`encode_score` applied.

    Raises
    ------
    ValueError
        If ``score`` is not a score :func:`encode_score` can produce.
    """
    key = int(_KEY.unpack(_DOUBLE.pack(score))[0])
    rank = key >> 60
    if rank < 1 or rank > 4:
        raise ValueError(f"not a ready-set score: {score!r}")
    return 5 - rank, MAX_RETRY_RANK - ((key >> 44) & MAX_RETRY_RANK), key & MAX_READY_MS
