# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled retry backoff (twin of ``runnerq_fast.engine._backoff_py``).

An exact ``int`` retry count that fits in 64 bits with ``float`` base, cap and
jitter takes the C path (``ldexp`` instead of a big-integer shift); any other
argument types go to the pure reference, so results and exceptions match.
Jitter draws from :func:`random.random`, as the reference does.
"""

from libc.math cimport ldexp

import random

from runnerq_fast.engine import _backoff_py

cdef object _py_backoff = _backoff_py.backoff_seconds


def backoff_seconds(retry, base=1.0, cap=3600.0, jitter=0.0):
    """Delay before the next attempt, in seconds (see ``runnerq_fast.engine._backoff_py``)."""
    cdef long long r
    cdef double b, c, j, delay
    if type(retry) is not int or type(base) is not float or type(cap) is not float or type(jitter) is not float:
        return _py_backoff(retry, base, cap, jitter)
    try:
        r = retry
    except OverflowError:
        return _py_backoff(retry, base, cap, jitter)
    b = base
    c = cap
    j = jitter
    if r < 0:
        r = 0
    if r >= 64:
        delay = c
    else:
        delay = b * ldexp(1.0, <int>r)
        # min(cap, x) keeps cap unless x is strictly smaller (NaN included)
        if not (delay < c):
            delay = c
    if j > 0.0:
        delay *= 1.0 - <double>random.random() * (j if not (1.0 < j) else 1.0)
    return delay
