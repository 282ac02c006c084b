# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled claimed-row decoding and batch parameter arrays (twin of ``runnerq_fast.backends.postgres._rows_py``).

msgspec stores a Struct's fields as object slots described by member
descriptors. For items whose type is exactly :class:`Ack`, :class:`LeaseRef`
or :class:`NewActivity`, the field pointers are read at the slot offsets found
once at import (one pass over the batch fills every column); anything else
(subclasses, duck-typed objects, unset slots) goes through ``getattr``.
Columns that can raise (``bytes.decode``) are filled afterwards, column by
column, so the first error is the same one the reference raises.
"""

from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8

from runnerq_fast.models import Ack, ClaimedActivity, LeaseRef, NewActivity


cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset
        int flags
        const char* doc

    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member


cdef object _Claimed = ClaimedActivity
cdef object _Ack = Ack
cdef object _LeaseRef = LeaseRef
cdef object _NewActivity = NewActivity


cdef Py_ssize_t _offset(object cls, str name) except -1:
    descr = cls.__dict__[name]
    if type(descr).__name__ != "member_descriptor":
        raise TypeError(f"{cls.__name__}.{name} is not a slot")
    return (<PyMemberDescrObject*>descr).d_member.offset


cdef Py_ssize_t A_ID = _offset(Ack, "id")
cdef Py_ssize_t A_TOKEN = _offset(Ack, "claim_token")
cdef Py_ssize_t A_OUTCOME = _offset(Ack, "outcome")
cdef Py_ssize_t A_RESULT = _offset(Ack, "result")
cdef Py_ssize_t A_ERROR = _offset(Ack, "error")
cdef Py_ssize_t A_RETRY_AT = _offset(Ack, "retry_at_ms")
cdef Py_ssize_t L_ID = _offset(LeaseRef, "id")
cdef Py_ssize_t L_TOKEN = _offset(LeaseRef, "claim_token")
cdef Py_ssize_t N_ID = _offset(NewActivity, "id")
cdef Py_ssize_t N_TYPE = _offset(NewActivity, "activity_type")
cdef Py_ssize_t N_PAYLOAD = _offset(NewActivity, "payload")
cdef Py_ssize_t N_PRIORITY = _offset(NewActivity, "priority")
cdef Py_ssize_t N_RETRIES = _offset(NewActivity, "max_retries")
cdef Py_ssize_t N_TIMEOUT = _offset(NewActivity, "timeout_ms")
cdef Py_ssize_t N_RUN_AT = _offset(NewActivity, "run_at_ms")
cdef Py_ssize_t N_META = _offset(NewActivity, "metadata")
cdef Py_ssize_t N_KEY = _offset(NewActivity, "idempotency_key")


cdef inline object _slot(object obj, Py_ssize_t offset, str name):
    """The field at ``offset`` of an exact-type Struct (``getattr`` if the slot is unset)."""
    cdef PyObject* p = (<PyObject**>((<char*><PyObject*>obj) + offset))[0]
    if p == NULL:
        return getattr(obj, name)
    return <object>p


cdef inline void _put(list lst, Py_ssize_t i, object value):
    Py_INCREF(value)
    PyList_SET_ITEM(lst, i, value)


cdef inline object _text(object data):
    """``data.decode()``, straight through the UTF-8 decoder for exact bytes (same result, same errors)."""
    if type(data) is bytes:
        return PyUnicode_DecodeUTF8(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), NULL)
    return data.decode()


cdef list _column(list items, str name):
    cdef Py_ssize_t i, n = len(items)
    cdef list out = PyList_New(n)
    for i in range(n):
        _put(out, i, getattr(items[i], name))
    return out


cdef bint _all_exact(list items, object cls):
    for it in items:
        if type(it) is not cls:
            return False
    return True


PG_EPOCH_MS = 946_684_800_000
cdef long long _PG_EPOCH_MS = 946_684_800_000


cdef inline object _epoch_ms(object sent):
    """Epoch milliseconds (floor) of 8 big-endian bytes of microseconds since 2000-01-01 (``timestamptz_send``)."""
    cdef const unsigned char* p
    cdef unsigned long long u = 0
    cdef long long us
    cdef int i
    if type(sent) is not bytes:
        if len(sent) != 8:
            raise ValueError(f"a timestamptz_send() value has 8 bytes, not {len(sent)}")
        return int.from_bytes(sent, "big", signed=True) // 1000 + PG_EPOCH_MS
    if PyBytes_GET_SIZE(sent) != 8:
        raise ValueError(f"a timestamptz_send() value has 8 bytes, not {PyBytes_GET_SIZE(sent)}")
    p = <const unsigned char*>PyBytes_AS_STRING(sent)
    for i in range(8):
        u = (u << 8) | p[i]
    us = <long long>u
    # floor division, as Python's // (C's / truncates toward zero)
    if us >= 0:
        return us // 1000 + _PG_EPOCH_MS
    return -((-(us + 1)) // 1000) - 1 + _PG_EPOCH_MS


def epoch_ms(sent):
    """Epoch milliseconds (floor) of a ``timestamptz_send()`` value (see ``runnerq_fast.backends.postgres._rows_py``)."""
    return _epoch_ms(sent)


def claimed_from_rows(rows, token):
    """Build the activities of one claim from its result rows (see ``runnerq_fast.backends.postgres._rows_py``)."""
    cdef list out = []
    for r in rows:
        out.append(_Claimed(r[0].hex, r[1], r[2], r[3], r[4], r[5], r[6], r[7], token,
                            _epoch_ms(r[8]), _epoch_ms(r[9])))
    return out


def ack_params(acks):
    """Parallel arrays of an ack batch (see ``runnerq_fast.backends.postgres._rows_py``)."""
    cdef list items = list(acks)
    cdef Py_ssize_t i, n = len(items)
    cdef list ids, tokens, outcomes, raw, errors, retry_at, results
    cdef object a, res
    cdef bint exact = _all_exact(items, _Ack)
    if not exact:
        ids = _column(items, "id")
        tokens = _column(items, "claim_token")
        outcomes = _column(items, "outcome")
        raw = _column(items, "result")
    else:
        ids, tokens, outcomes = PyList_New(n), PyList_New(n), PyList_New(n)
        raw, errors, retry_at = PyList_New(n), PyList_New(n), PyList_New(n)
        for i in range(n):
            a = items[i]
            _put(ids, i, _slot(a, A_ID, "id"))
            _put(tokens, i, _slot(a, A_TOKEN, "claim_token"))
            _put(outcomes, i, _slot(a, A_OUTCOME, "outcome"))
            _put(raw, i, _slot(a, A_RESULT, "result"))
            _put(errors, i, _slot(a, A_ERROR, "error"))
            _put(retry_at, i, _slot(a, A_RETRY_AT, "retry_at_ms"))
    results = PyList_New(n)
    for i in range(n):
        res = raw[i]
        _put(results, i, None if res is None else _text(res))
    if not exact:
        errors = _column(items, "error")
        retry_at = _column(items, "retry_at_ms")
    return ids, tokens, outcomes, results, errors, retry_at


def lease_params(leases):
    """Parallel arrays of lease references: ids and claim tokens (see ``runnerq_fast.backends.postgres._rows_py``)."""
    cdef list items = list(leases)
    cdef Py_ssize_t i, n = len(items)
    cdef list ids, tokens
    cdef object r
    if not _all_exact(items, _LeaseRef):
        return _column(items, "id"), _column(items, "claim_token")
    ids, tokens = PyList_New(n), PyList_New(n)
    for i in range(n):
        r = items[i]
        _put(ids, i, _slot(r, L_ID, "id"))
        _put(tokens, i, _slot(r, L_TOKEN, "claim_token"))
    return ids, tokens


def enqueue_params(items):
    """Parallel arrays of an enqueue batch (see ``runnerq_fast.backends.postgres._rows_py``)."""
    cdef list its = list(items)
    cdef Py_ssize_t i, n = len(its)
    cdef list ids, types, raw_payloads, prios, retries, timeouts, run_at, raw_metas, keys, payloads, metas
    cdef object it
    if not _all_exact(its, _NewActivity):
        ids = _column(its, "id")
        types = _column(its, "activity_type")
        raw_payloads = _column(its, "payload")
    else:
        ids, types, raw_payloads = PyList_New(n), PyList_New(n), PyList_New(n)
        prios, retries, timeouts = PyList_New(n), PyList_New(n), PyList_New(n)
        run_at, raw_metas, keys = PyList_New(n), PyList_New(n), PyList_New(n)
        for i in range(n):
            it = its[i]
            _put(ids, i, _slot(it, N_ID, "id"))
            _put(types, i, _slot(it, N_TYPE, "activity_type"))
            _put(raw_payloads, i, _slot(it, N_PAYLOAD, "payload"))
            _put(prios, i, _slot(it, N_PRIORITY, "priority"))
            _put(retries, i, _slot(it, N_RETRIES, "max_retries"))
            _put(timeouts, i, _slot(it, N_TIMEOUT, "timeout_ms"))
            _put(run_at, i, _slot(it, N_RUN_AT, "run_at_ms"))
            _put(raw_metas, i, _slot(it, N_META, "metadata"))
            _put(keys, i, _slot(it, N_KEY, "idempotency_key"))
    payloads = PyList_New(n)
    for i in range(n):
        _put(payloads, i, _text(raw_payloads[i]))
    if not _all_exact(its, _NewActivity):
        prios = _column(its, "priority")
        retries = _column(its, "max_retries")
        timeouts = _column(its, "timeout_ms")
        run_at = _column(its, "run_at_ms")
        raw_metas = _column(its, "metadata")
    metas = PyList_New(n)
    for i in range(n):
        _put(metas, i, _text(raw_metas[i]))
    if not _all_exact(its, _NewActivity):
        keys = _column(its, "idempotency_key")
    return ids, types, payloads, prios, retries, timeouts, run_at, metas, keys
