# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled activity ids (twin of ``runnerq_fast._ids_py``; the layout is in ``runnerq_fast.ids``).

A sequence number ``ms << 12 | counter`` is reserved per id exactly as the
twin does (a new millisecond starts at counter 0, within one the counter goes
on, past 4095 it borrows the next millisecond: that is ``seq + 1``). Each id
is a 32-character ASCII string written in place from the two 64-bit halves;
the random half is ``0b10`` and the top 62 bits of a 64-bit draw from
:func:`random.getrandbits` (one draw for a whole batch). The clock is
``time.time_ns`` looked up at each call, as in the twin.
"""

from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from libc.stdint cimport uint64_t
from libc.string cimport memcpy

import random as _random
import time as _time

_rand = _random.getrandbits  # ids need uniqueness, not secrecy

cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void* PyUnicode_DATA(object o)

cdef const char* _HEX = b"0123456789abcdef"

#: The (ms << 12 | counter) of the last id handed out.
cdef uint64_t _last_seq = 0


cdef inline void _put_hex(char* out, uint64_t value) noexcept:
    cdef int k
    for k in range(15, -1, -1):
        out[k] = _HEX[value & 15]
        value >>= 4


cdef uint64_t _reserve(Py_ssize_t n) except? 0:
    global _last_seq
    cdef uint64_t ns = _time.time_ns()
    cdef uint64_t now = (ns // 1000000) << 12
    cdef uint64_t first = now if now > _last_seq else _last_seq + 1
    _last_seq = first + <uint64_t>n - 1
    return first


cdef str _make(uint64_t seq, uint64_t rnd):
    cdef object text = PyUnicode_New(32, 127)
    cdef char* out = <char*>PyUnicode_DATA(text)
    _put_hex(out, ((seq >> 12) << 16) | 0x7000 | (seq & 0xFFF))
    _put_hex(out + 16, 0x8000000000000000ULL | (rnd >> 2))
    return <str>text


def new_activity_id():
    """A new UUIDv7 as 32 lowercase hex characters (see ``runnerq_fast._ids_py.new_activity_id``)."""
    cdef uint64_t seq = _reserve(1)
    return _make(seq, <uint64_t>_rand(64))


def new_activity_ids(Py_ssize_t n):
    """``n`` new ids, strictly increasing (see ``runnerq_fast._ids_py.new_activity_ids``)."""
    if n <= 0:
        return []
    cdef uint64_t first = _reserve(n)
    cdef bytes raw = _rand(64 * n).to_bytes(8 * n, "little")
    cdef const char* p = raw
    cdef uint64_t rnd
    cdef Py_ssize_t i
    cdef list ids = PyList_New(n)
    for i in range(n):
        memcpy(&rnd, p + 8 * i, 8)
        text = _make(first + <uint64_t>i, rnd)
        Py_INCREF(text)
        PyList_SET_ITEM(ids, i, text)
    return ids
