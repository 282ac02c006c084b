# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled payload codec (twin of ``runnerq_fast._codec_py``).

Same msgspec encoder and decoder and the same checks as the reference, with
the per-call Python overhead removed: bound methods cached as C globals, the
NUL scan done on the bytes buffer with ``memchr``, and the one walk that
checks every value is a JSON type (exact) and every float finite typed. A
refusal is explained by the twin's ``explain`` (the slow path), so both
give the same message; so is a payload holding typed values (a datetime, a
Struct: the twin's ``typed_refusal`` accepts or refuses it).
"""

from cpython.bool cimport PyBool_Check
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_CheckExact, PyDict_Next
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact
from cpython.list cimport PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_CheckExact
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_CheckExact
from libc.math cimport isfinite
from libc.string cimport memchr

import msgspec

from runnerq_fast._codec_py import explain, typed_refusal
from runnerq_fast.errors import InvalidActivityError

cdef object _encode = msgspec.json.Encoder().encode
cdef object _decode = msgspec.json.Decoder().decode
cdef object _InvalidActivityError = InvalidActivityError
cdef object _explain = explain  # the slow path (naming the offending value's path) is shared with the twin
cdef object _typed_refusal = typed_refusal


cdef bint _has(const char* buf, Py_ssize_t n, const char* needle, Py_ssize_t m) noexcept:
    """Whether ``needle`` (m bytes) occurs in ``buf`` (n bytes)."""
    cdef const char* p = buf
    cdef const char* end = buf + n
    cdef const char* hit
    cdef Py_ssize_t i
    cdef bint ok
    while end - p >= m:
        hit = <const char*>memchr(p, needle[0], end - p - m + 1)
        if hit == NULL:
            return False
        ok = True
        for i in range(1, m):
            if hit[i] != needle[i]:
                ok = False
                break
        if ok:
            return True
        p = hit + 1
    return False


cdef int _DEPTH = 400  # deeper nesting is walked by the explicit-stack twin below (no C recursion limit)


cdef inline int _scalar_ok(PyObject* v) noexcept:
    """1: an accepted scalar; 0: not accepted; -1: a container to look into."""
    if PyUnicode_CheckExact(<object>v) or PyLong_CheckExact(<object>v) or v == <PyObject*>None \
            or PyBool_Check(<object>v):
        return 1
    if PyFloat_CheckExact(<object>v):
        return 1 if isfinite(PyFloat_AS_DOUBLE(<object>v)) else 0
    if PyDict_CheckExact(<object>v) or PyList_CheckExact(<object>v):
        return -1
    return 0


cdef bint _plain(object o, int depth) except -1:
    """Whether the dict or list ``o`` holds only accepted values; recursive in C up to ``_DEPTH``."""
    cdef Py_ssize_t pos = 0, i, n
    cdef PyObject* key
    cdef PyObject* value
    cdef int r
    if depth > _DEPTH:
        return _plain_stack(o)
    if PyDict_CheckExact(o):
        while PyDict_Next(o, &pos, &key, &value):
            if not PyUnicode_CheckExact(<object>key):
                return False
            r = _scalar_ok(value)
            if r == 0 or (r < 0 and not _plain(<object>value, depth + 1)):
                return False
        return True
    n = PyList_GET_SIZE(o)
    for i in range(n):
        if i >= PyList_GET_SIZE(o):  # shrunk meanwhile (a handler thread): stop where it ends
            break
        value = PyList_GET_ITEM(o, i)
        r = _scalar_ok(value)
        if r == 0 or (r < 0 and not _plain(<object>value, depth + 1)):
            return False
    return True


cdef bint _plain_stack(object obj) except -1:
    """The same check with an explicit stack (see ``_codec_py.is_plain_json``), for very deep nesting."""
    cdef list stack = [obj]
    cdef object o
    cdef type t
    while stack:
        o = stack.pop()
        t = type(o)
        if t is str or t is int or t is bool or o is None:
            continue
        if t is float:
            if not isfinite(<double>o):
                return False
        elif t is dict:
            for k in <dict>o:
                if type(k) is not str:
                    return False
            stack.extend((<dict>o).values())
        elif t is list:
            stack.extend(<list>o)
        else:
            return False
    return True


cdef bint _is_plain_json(object obj) except -1:
    """Whether ``obj`` holds only the JSON types (exact) and finite floats (see ``_codec_py.is_plain_json``)."""
    cdef int r = _scalar_ok(<PyObject*>obj)
    if r >= 0:
        return r == 1
    return _plain(obj, 0)


def is_plain_json(obj):
    """Whether ``obj`` holds only the JSON types (exact) and finite floats (see ``_codec_py.is_plain_json``)."""
    return _is_plain_json(obj)


def encode_json(obj, max_bytes, what="payload"):
    """Encode ``obj`` as UTF-8 JSON, refusing what would not come back equal or cannot be stored (see ``_codec_py``)."""
    if not _is_plain_json(obj):
        raise _InvalidActivityError(_explain(obj, what))
    return _encoded(obj, max_bytes, what)


def encode_payload(obj, max_bytes):
    """Encode a payload: ``encode_json``, accepting the typed values too (see ``_codec_py.encode_payload``)."""
    if not _is_plain_json(obj):
        why = _typed_refusal(obj, "payload")
        if why is not None:
            raise _InvalidActivityError(why)
    return _encoded(obj, max_bytes, "payload")


cdef bytes _encoded(obj, max_bytes, what):
    """msgspec's encoding of an accepted ``obj``, refused if it holds NUL or exceeds ``max_bytes``."""
    cdef bytes data
    cdef const char* buf
    cdef Py_ssize_t n
    try:
        data = _encode(obj)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _InvalidActivityError(f"{what} is not JSON-encodable: {exc}") from None
    except RecursionError:
        raise _InvalidActivityError(f"{what} is nested too deeply to encode") from None
    buf = PyBytes_AS_STRING(data)
    n = PyBytes_GET_SIZE(data)
    if memchr(buf, 92, n) != NULL and _has(buf, n, b"\\u0000", 6):
        raise _InvalidActivityError(f"{what} contains a NUL character (\\u0000), which cannot be stored")
    if max_bytes and n > max_bytes:
        raise _InvalidActivityError(f"{what} is {n} bytes, over the limit of {max_bytes} bytes")
    return data


def decode_json(data):
    """Decode UTF-8 JSON; raises :class:`msgspec.DecodeError` on bad input."""
    return _decode(data)


def encode_metadata(metadata, max_bytes=0):
    """Encode activity metadata (a flat str→str mapping) as a JSON object (see ``runnerq_fast._codec_py``)."""
    if not metadata:
        return b"{}"
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise _InvalidActivityError("metadata keys and values must be strings")
    return encode_json(metadata, max_bytes, "metadata")
