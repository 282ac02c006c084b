"""Pure-Python payload codec (the reference twin of the compiled codec).

JSON via msgspec. Encoding refuses what would not come back equal (every
type but the JSON ones: msgspec would turn bytes into base64 text, a datetime
into ISO text, a tuple into a list, ``{1: ...}`` into ``{"1": ...}``), what
JSON cannot hold (NaN/Infinity, which msgspec would silently write as
``null``), what a backend cannot store (the NUL character: PostgreSQL text and
jsonb cannot hold it; lone surrogates) and oversized values. A payload
(:func:`encode_payload`) may also hold the :data:`TYPED` values, which a
handler that annotates its payload with their type gets back equal.
:func:`explain` and :func:`typed_refusal` name the path of the offending
value; the compiled twin uses them too, so the messages are the same.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import math
import uuid
from typing import Any

import msgspec

from runnerq_fast.errors import InvalidActivityError

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()
_NUL = b"\\u0000"

ACCEPTED = "dict (with str keys), list, str, int, float, bool and None"
"""What a result or metadata may hold: the JSON types, which arrive exactly as they were sent."""

TYPED = (
    "datetime, date, time, timedelta, UUID, Decimal, an enum member (str or int value), "
    "a msgspec Struct or a dataclass instance"
)
"""What a payload may hold besides :data:`ACCEPTED`: msgspec writes each as JSON (ISO 8601 text, a str,
its value, an object of its fields) and a handler whose payload annotation names the type gets it back
equal; an unannotated handler gets the JSON value (a datetime arrives as its ISO text)."""

ACCEPTED_PAYLOAD = f"{ACCEPTED}; or {TYPED}"
"""What a payload may hold (:func:`encode_payload`)."""

_TYPED_SCALARS = (datetime.date, datetime.time, datetime.timedelta, uuid.UUID, decimal.Decimal)


def is_plain_json(obj: Any) -> bool:
    """Whether ``obj`` holds only :data:`ACCEPTED` values (exact types) and finite floats.

    One pass with an explicit stack (no recursion, so nesting deeper than the
    interpreter's recursion limit is walked too); subclasses (an ``IntEnum``,
    an ``OrderedDict``) count as foreign, since they would arrive as the plain type.
    """
    stack = [obj]
    pop, extend = stack.pop, stack.extend
    while stack:
        o = pop()
        t = type(o)
        if t is str or t is int or t is bool or o is None:
            continue
        if t is float:
            if not math.isfinite(o):
                return False
        elif t is dict:
            for k in o:
                if type(k) is not str:
                    return False
            extend(o.values())
        elif t is list:
            extend(o)
        else:
            return False
    return True


def _arrives_as(value: Any) -> str:
    """How msgspec would hand ``value`` back after a JSON round trip."""
    if isinstance(value, bytes | bytearray | memoryview):
        return "base64 text"
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return "ISO 8601 text (a naive datetime would lose the fact that it is naive)" if (
            isinstance(value, datetime.datetime) and value.tzinfo is None
        ) else "ISO 8601 text"
    if isinstance(value, datetime.timedelta):
        return "ISO 8601 duration text"
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return "a str"
    if isinstance(value, enum.Enum):
        return "its plain value"
    if isinstance(value, msgspec.Struct) or dataclasses.is_dataclass(value):
        return "a dict"
    if isinstance(value, set | frozenset | tuple):
        return "a list"
    for plain in (dict, list, str, int, float):
        if isinstance(value, plain):
            return f"a plain {plain.__name__}"
    return ""


def _label(label: int | str | tuple[str] | None) -> str:
    """The path step of an item: ``[3]`` (list index), ``["key"]`` (dict key), ``.name`` (field, a 1-tuple)."""
    if label is None:
        return ""
    if type(label) is int:
        return f"[{label}]"
    if type(label) is tuple:
        return "." + label[0]
    return "[" + _encoder.encode(label).decode("utf-8", "backslashreplace") + "]"


def _fields(o: Any) -> Any:
    """The ``((name,), value)`` pairs of the fields of a Struct or dataclass instance ``o``; ``None`` if neither."""
    if isinstance(o, msgspec.Struct):
        return (((name,), getattr(o, name)) for name in o.__struct_fields__)
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return (((f.name,), getattr(o, f.name)) for f in dataclasses.fields(o))
    return None


def _offence(obj: Any, what: str, typed: bool) -> str | None:
    """The first value of ``obj`` (in document order) that may not be stored, with its path; ``None`` if none.

    A depth-first walk with an explicit stack of iterators; a path is only
    spelled out for the containers it descends into and the offender. With
    ``typed``, the :data:`TYPED` values are accepted and the fields of a
    Struct or dataclass walked (``payload["order"].lines[0]``).
    """
    accepted = ACCEPTED_PAYLOAD if typed else ACCEPTED
    stack: list[tuple[str, Any]] = [("", iter(((None, obj),)))]
    while stack:
        path, items = stack[-1]
        for label, o in items:
            t = type(o)
            if t is str or t is int or t is bool or o is None:
                continue
            if t is float:
                if math.isfinite(o):
                    continue
                return f"{what}{path}{_label(label)} is {o!r}: JSON has no NaN or Infinity"
            here = path + _label(label)
            if t is dict:
                for k in o:
                    if type(k) is not str:
                        note = f" (it would arrive as the str {str(k)!r})" if type(k) is int else ""
                        return (f"{what}{here} has key {k!r} of type {type(k).__name__}{note}: JSON object keys "
                                f"are str; {what} values may be {accepted}")
                stack.append((here, iter(o.items())))
                break
            if t is list:
                stack.append((here, enumerate(o)))
                break
            if typed:
                if isinstance(o, decimal.Decimal) and not o.is_finite():
                    return f"{what}{here} is Decimal({str(o)!r}): JSON has no NaN or Infinity"
                if isinstance(o, _TYPED_SCALARS) or o is msgspec.UNSET:  # UNSET: a Struct field msgspec leaves out
                    continue
                if isinstance(o, enum.Enum):
                    if type(o.value) is str or type(o.value) is int:
                        continue
                    return (f"{what}{here} is {t.__name__}.{o.name}, whose value {o.value!r} is not a str or an "
                            f"int; {what} values may be {accepted}")
                fields = _fields(o)
                if fields is not None:
                    stack.append((here, fields))
                    break
            how = _arrives_as(o)
            fate = f"which would arrive as {how}" if how else "which JSON cannot represent"
            return f"{what}{here} is {t.__name__}, {fate}; {what} values may be {accepted}"
        else:
            stack.pop()
    return None


def explain(obj: Any, what: str) -> str:
    """The reason :func:`is_plain_json` refused ``obj``: the first offending value in document order and its path.

    Returns
    -------
    str
        E.g. ``'payload["items"][3] is bytes, which would arrive as base64 text; ...'``.
    """
    return _offence(obj, what, False) or f"{what} holds a value JSON cannot represent"


def typed_refusal(obj: Any, what: str = "payload") -> str | None:
    """Why :func:`encode_payload` refuses ``obj`` (the first offending value and its path), or ``None``.

    Called once :func:`is_plain_json` is false: ``None`` means every value
    that is not a JSON type is one of :data:`TYPED` (with the fields of a
    Struct or dataclass under the same rules).
    """
    return _offence(obj, what, True)


def encode_json(obj: Any, max_bytes: int, what: str = "payload") -> bytes:
    """Encode ``obj`` as UTF-8 JSON, refusing what would not come back equal, or that no backend can store.

    What a handler receives is exactly what was enqueued (and what a caller
    gets from a result is exactly what the handler returned), so only the
    JSON types are accepted: :data:`ACCEPTED`, exact types (no subclasses),
    floats finite. Everything msgspec would silently convert is refused with
    the path of the offending value: a non-str dict key (``{1: ...}`` would
    arrive as ``{"1": ...}``), ``bytes`` (base64 text), ``datetime``/``date``
    (ISO text), ``Decimal``/``UUID`` (str), ``set``/``tuple`` (list), an enum
    (its value), a Struct or dataclass (dict).

    Parameters
    ----------
    obj : Any
        The value to encode.
    max_bytes : int
        Largest accepted encoding in bytes; 0 disables the check.
    what : str
        Name used in error messages (``"payload"``, ``"result"``, ``"metadata"``).

    Returns
    -------
    bytes

    Raises
    ------
    InvalidActivityError
        If a value is not of an accepted type (the message names its path,
        e.g. ``payload["items"][3]``), a float is NaN or Infinity, a text holds
        NUL or a lone surrogate, an int is outside [-2**63, 2**64 - 1], the
        nesting is too deep to encode, or the encoding exceeds ``max_bytes``.
    """
    if not is_plain_json(obj):
        raise InvalidActivityError(explain(obj, what))
    return _encoded(obj, max_bytes, what)


def encode_payload(obj: Any, max_bytes: int) -> bytes:
    """Encode a payload: :func:`encode_json`, accepting the :data:`TYPED` values too.

    A datetime, date, time or timedelta is written as ISO 8601 text, a UUID
    or a Decimal as a str, an enum member as its value, a msgspec Struct or a
    dataclass as an object of its fields (under the same rules, at any
    depth). A handler that annotates its payload with the type gets it back
    equal; an unannotated one gets the JSON value. Everything else
    :func:`encode_json` refuses is still refused: bytes, tuples, sets, dict
    keys that are not str, NaN and Infinity, subclasses of the JSON types
    (an ``OrderedDict``), other objects, NUL, lone surrogates, oversized values.

    Parameters
    ----------
    obj : Any
        The payload.
    max_bytes : int
        Largest accepted encoding in bytes; 0 disables the check.

    Returns
    -------
    bytes

    Raises
    ------
    InvalidActivityError
        As :func:`encode_json` (the message names the path of the offending
        value, e.g. ``payload["order"].lines[0]``).
    """
    if not is_plain_json(obj):
        why = typed_refusal(obj, "payload")
        if why is not None:
            raise InvalidActivityError(why)
    return _encoded(obj, max_bytes, "payload")


def _encoded(obj: Any, max_bytes: int, what: str) -> bytes:
    """msgspec's encoding of an accepted ``obj``, refused if it holds NUL or exceeds ``max_bytes``."""
    try:
        data = _encoder.encode(obj)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidActivityError(f"{what} is not JSON-encodable: {exc}") from None
    except RecursionError:
        raise InvalidActivityError(f"{what} is nested too deeply to encode") from None
    if _NUL in data:
        raise InvalidActivityError(f"{what} contains a NUL character (\\u0000), which cannot be stored")
    if max_bytes and len(data) > max_bytes:
        raise InvalidActivityError(f"{what} is {len(data)} bytes, over the limit of {max_bytes} bytes")
    return data


def decode_json(data: bytes | str) -> Any:
    """Decode UTF-8 JSON; raises :class:`msgspec.DecodeError` on bad input."""
    return _decoder.decode(data)


def encode_metadata(metadata: dict[str, str] | None, max_bytes: int = 0) -> bytes:
    """Encode activity metadata (a flat str→str mapping) as a JSON object.

    Parameters
    ----------
    metadata : dict of str to str, or None
        ``None`` or empty encodes as ``{}``.
    max_bytes : int
        Largest accepted encoding in bytes (the executor passes
        ``max_payload_bytes``); 0 (default) disables the check.

    Raises
    ------
    InvalidActivityError
        If a key or value is not a string, holds a NUL character or a lone
        surrogate, or the encoding exceeds ``max_bytes``.
    """
    if not metadata:
        return b"{}"
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidActivityError("metadata keys and values must be strings")
    return encode_json(metadata, max_bytes, "metadata")
