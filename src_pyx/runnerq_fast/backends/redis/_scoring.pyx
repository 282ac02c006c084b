# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled Redis ready-set score (twin of ``runnerq_fast.backends.redis._scoring_py``).

The key is built in a 64-bit unsigned integer and reinterpreted as a double
with ``memcpy``, instead of a ``struct`` pack/unpack round trip. Exact ``int``
arguments that fit in 64 bits (``float`` for :func:`decode_score`) take the C
path; anything else (bools, floats, huge ints, other types) is handed to the
pure reference so results and exceptions are identical by construction.
"""

from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy

from runnerq_fast.backends.redis import _scoring_py

MAX_READY_MS = (1 << 44) - 1
MAX_RETRY_RANK = (1 << 16) - 1

cdef int64_t _MAX_READY = (<int64_t>1 << 44) - 1
cdef int64_t _MAX_RETRY = (<int64_t>1 << 16) - 1
cdef object _py_encode = _scoring_py.encode_score
cdef object _py_decode = _scoring_py.decode_score


def encode_score(priority, retry_count, ready_ms):
    """Score of an activity in a Redis ready set (see ``runnerq_fast.backends.redis._scoring_py``)."""
    cdef int64_t p, r, m
    cdef uint64_t key
    cdef double out
    if type(priority) is not int or type(retry_count) is not int or type(ready_ms) is not int:
        return _py_encode(priority, retry_count, ready_ms)
    try:
        p = priority
        r = retry_count
        m = ready_ms
    except OverflowError:
        return _py_encode(priority, retry_count, ready_ms)
    if p < 1 or p > 4:
        raise ValueError(f"priority must be 1..4, got {priority!r}")
    if r < 0:
        raise ValueError(f"retry_count must be >= 0, got {retry_count!r}")
    if r > _MAX_RETRY:
        r = _MAX_RETRY
    if m < 0:
        m = 0
    elif m > _MAX_READY:
        m = _MAX_READY
    key = (<uint64_t>(5 - p) << 60) | (<uint64_t>(_MAX_RETRY - r) << 44) | <uint64_t>m
    memcpy(&out, &key, 8)
    return out


def decode_score(score):
    """Inverse of :func:`encode_score` (see ``runnerq_fast.backends.redis._scoring_py``)."""
    cdef double d
    cdef uint64_t key, rank
    if type(score) is not float:
        return _py_decode(score)
    d = score
    memcpy(&key, &d, 8)
    rank = key >> 60
    if rank < 1 or rank > 4:
        raise ValueError(f"not a ready-set score: {score!r}")
    return (
        <long long>(5 - rank),
        <long long>(_MAX_RETRY - <int64_t>((key >> 44) & <uint64_t>_MAX_RETRY)),
        <long long>(key & <uint64_t>_MAX_READY),
    )
