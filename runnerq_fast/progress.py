"""Progress values: what :meth:`ActivityContext.set_progress` accepts, and how it is stored and read back.

A progress value is either a fraction (a number from 0 to 1) or a JSON
object (a ``dict`` with ``str`` keys and plain JSON values) of at most
:data:`MAX_PROGRESS_BYTES` once encoded. It is stored as JSON text
(:func:`encode_progress`) and read back with :func:`decode_progress`.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from runnerq_fast.codec import decode_json, encode_json

__all__ = ["MAX_PROGRESS_BYTES", "Progress", "decode_progress", "encode_progress"]

MAX_PROGRESS_BYTES = 8192
"""Largest encoded progress object, in bytes (UTF-8 JSON)."""

Progress = float | dict[str, Any]
"""A decoded progress value: a fraction from 0 to 1, or a JSON object."""


def encode_progress(value: object) -> str:
    """The stored JSON text of a progress value.

    Parameters
    ----------
    value : float or dict
        A fraction from 0 to 1 (``int`` 0 and 1 too; not ``bool``), or a dict
        of JSON values with ``str`` keys.

    Returns
    -------
    str
        JSON text: the number (``"0.25"``) or the object.

    Raises
    ------
    ValueError
        If the fraction is NaN, infinite or outside [0, 1]; an
        :class:`~runnerq_fast.errors.InvalidActivityError` (a ``ValueError``)
        if the dict holds anything but JSON values (the message names the
        offending path) or encodes to more than :data:`MAX_PROGRESS_BYTES`.
    TypeError
        If ``value`` is neither a number nor a dict.
    """
    if type(value) is float or type(value) is int:
        f = float(value)
        if not math.isfinite(f) or not 0.0 <= f <= 1.0:
            raise ValueError(f"progress must be a fraction from 0 to 1 or a dict, got {value!r}")
        return repr(f)
    if type(value) is dict:
        return encode_json(value, MAX_PROGRESS_BYTES, "progress").decode()
    raise TypeError(f"progress must be a fraction from 0 to 1 (float) or a dict, not {type(value).__name__}")


def decode_progress(raw: str | bytes | None) -> Progress | None:
    """The value of stored progress text; ``None`` for none, or for text that is not a fraction or an object.

    Parameters
    ----------
    raw : str, bytes or None
        :attr:`ActivitySnapshot.progress <runnerq_fast.models.ActivitySnapshot.progress>`.
    """
    if raw is None:
        return None
    try:
        value = decode_json(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    if type(value) is int:
        value = float(value)
    if type(value) is float or type(value) is dict:
        return value
    return None
