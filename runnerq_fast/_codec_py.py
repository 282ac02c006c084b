"""Pure-Python payload codec (the reference twin of the compiled codec).

JSON via msgspec. Encoding validates what every backend must refuse: values
that do not encode, NaN/Infinity (msgspec would silently write ``null``), the
NUL character (PostgreSQL text and jsonb cannot hold it) and oversized
payloads.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from runnerq_fast.errors import InvalidActivityError

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()
_NUL = b"\\u0000"
_NULL = b"null"


def _find_non_finite(obj: Any) -> bool:
    """Whether a float NaN/Infinity sits anywhere in dicts, lists and tuples of ``obj``.

    An explicit stack, not recursion: msgspec encodes nesting deeper than the
    interpreter's recursion limit would allow a recursive walk to check.
    """
    stack = [obj]
    pop, extend = stack.pop, stack.extend
    while stack:
        o = pop()
        if isinstance(o, float):
            if not math.isfinite(o):
                return True
        elif isinstance(o, dict):
            extend(o.values())
        elif isinstance(o, list | tuple):
            extend(o)
    return False


def encode_json(obj: Any, max_bytes: int, what: str = "payload") -> bytes:
    """Encode ``obj`` as UTF-8 JSON, refusing what no backend can store.

    Parameters
    ----------
    obj : Any
        A JSON-compatible value (dict, list, str, int, float, bool, None, and
        what msgspec encodes natively such as datetimes and Structs).
    max_bytes : int
        Largest accepted encoding in bytes; 0 disables the check.
    what : str
        Name used in error messages.

    Returns
    -------
    bytes

    Raises
    ------
    InvalidActivityError
        If the value does not encode, holds NaN or Infinity, holds a NUL
        character, or encodes to more than ``max_bytes`` bytes.
    """
    try:
        data = _encoder.encode(obj)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidActivityError(f"{what} is not JSON-encodable: {exc}") from None
    except RecursionError:
        raise InvalidActivityError(f"{what} is nested too deeply to encode") from None
    if _NUL in data:
        raise InvalidActivityError(f"{what} contains a NUL character (\\u0000), which cannot be stored")
    if _NULL in data and _find_non_finite(obj):
        raise InvalidActivityError(f"{what} contains NaN or Infinity, which JSON cannot represent")
    if max_bytes and len(data) > max_bytes:
        raise InvalidActivityError(f"{what} is {len(data)} bytes, over the limit of {max_bytes} bytes")
    return data


def decode_json(data: bytes | str) -> Any:
    """Decode UTF-8 JSON; raises :class:`msgspec.DecodeError` on bad input."""
    return _decoder.decode(data)


def encode_metadata(metadata: dict[str, str] | None) -> bytes:
    """Encode activity metadata (a flat str→str mapping) as a JSON object.

    Raises
    ------
    InvalidActivityError
        If a key or value is not a string or holds a NUL character.
    """
    if not metadata:
        return b"{}"
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidActivityError("metadata keys and values must be strings")
    return encode_json(metadata, 0, "metadata")
