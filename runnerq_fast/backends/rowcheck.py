"""Stored rows that cannot be decoded: the check every backend applies where it reads rows.

A row damaged outside this library (a hand edit, a bad restore, a disk fault,
another program writing the same store) may hold a value its column or field
cannot mean: a priority ``'high'``, a retry count that is no number, text that
is not UTF-8. Such a row must never raise out of a read, wedge a claim or
strand the rows read with it. The backends:

* dead-letter it alone, with :func:`reason` as its last error, when a claim
  or the reaper reads it (nothing around it is charged an attempt);
* show it in listings and ``get_activity`` as :func:`snapshot` builds it: the
  fields that decode, placeholders (``0``, ``None``, the text with
  replacement characters, ``{}`` for metadata) for the others, and the reason in
  :attr:`~runnerq_fast.models.ActivitySnapshot.corrupt`.

A snapshot's metadata is decoded once, here (:func:`decode_metadata`): the stored JSON text becomes the
``dict[str, str]`` users read.

The reason starts with :data:`PREFIX`; the Redis Lua scripts build the same text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from runnerq_fast.models import ActivitySnapshot, ActivityStatus

__all__ = ["INT_FIELDS", "PREFIX", "as_int", "as_text", "decode_metadata", "reason", "shown_metadata", "snapshot"]

PREFIX = "corrupt row: "
"""First words of every reason (and of the last error of a row dead-lettered for it)."""

INT_FIELDS = ("priority", "retry_count", "max_retries", "timeout_ms", "created_at_ms", "ready_at_ms")
"""Snapshot fields that must hold an integer."""

_OPTIONAL_INT_FIELDS = ("started_at_ms", "finished_at_ms", "lease_expires_at_ms")
_TEXT_FIELDS = ("id", "queue", "activity_type", "status")
_OPTIONAL_TEXT_FIELDS = ("last_error", "idempotency_key", "parent_id", "traceback")
_STATUSES = frozenset(s.value for s in ActivityStatus)
_SHOWN = 40  # characters of a bad value quoted in a reason


def as_int(value: object) -> object:
    """``value`` as an ``int`` when it is the decimal text (or bytes) of one, else ``value`` unchanged.

    ``None`` stays ``None``; a ``bool`` or a ``float`` is not an integer here.
    """
    if type(value) is int or value is None:
        return value
    if isinstance(value, bytes | str):
        body = value[1:] if value[:1] in ("-", b"-") else value
        if body and body.isdigit() and body.isascii() and len(body) <= 18:
            return int(value)
    return value


def as_text(value: object) -> object:
    """``value`` as ``str`` when it is UTF-8 bytes or text, else ``value`` unchanged."""
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return value
    return value


_METADATA = msgspec.json.Decoder(dict[str, str])
_EMPTY = (b"{}", "{}")


def decode_metadata(stored: bytes | str) -> dict[str, str]:
    """Stored metadata (JSON text of a flat object of strings) as a new ``dict``.

    Raises
    ------
    msgspec.DecodeError
        If ``stored`` is not the JSON text of an object whose values are all strings.
    """
    if stored in _EMPTY:
        return {}
    return _METADATA.decode(stored)


def shown_metadata(stored: object) -> tuple[dict[str, str], str | None]:
    """Stored metadata as a snapshot shows it: ``(the dict, None)``, or ``({}, why)`` when it does not decode.

    ``why`` (without :data:`PREFIX`) names a value that is not the JSON text of an object of strings; a value
    that is no text at all is left to :func:`reason` (``why`` is ``None`` then too).
    """
    try:
        return decode_metadata(stored), None  # type: ignore[arg-type]
    except (msgspec.DecodeError, UnicodeDecodeError, TypeError):
        if not isinstance(stored, bytes | str):
            return {}, None
        return {}, f"metadata is {_show(stored)}, not a JSON object of strings"


def _show(value: object) -> str:
    if value is None:
        return "missing"
    text = repr(as_text(value))  # bytes that are UTF-8 are shown as text, as the Lua scripts show them
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def reason(fields: Mapping[str, Any]) -> str | None:
    """Why a row with these snapshot ``fields`` cannot be decoded, or ``None`` if it can.

    Parameters
    ----------
    fields : mapping of str to object
        Values by :class:`~runnerq_fast.models.ActivitySnapshot` field name, as
        read (after :func:`as_int` / :func:`as_text` where the store holds text);
        fields that are absent are not checked.

    Returns
    -------
    str or None
        ``"corrupt row: <field> is <value>, not <what it must be>"`` for each
        bad field, joined by ``"; "``.
    """
    bad = []
    for name in INT_FIELDS:
        if name in fields and type(fields[name]) is not int:
            bad.append(f"{name} is {_show(fields[name])}, not an integer")
    for name in _OPTIONAL_INT_FIELDS:
        v = fields.get(name)
        if v is not None and type(v) is not int:
            bad.append(f"{name} is {_show(v)}, not an integer")
    for name in _TEXT_FIELDS:
        if name in fields and not isinstance(fields[name], str):
            bad.append(f"{name} is {_show(fields[name])}, not UTF-8 text")
    status = fields.get("status")
    if isinstance(status, str) and status not in _STATUSES:
        bad.append(f"status is {_show(status)}, not an activity status")
    for name in _OPTIONAL_TEXT_FIELDS:
        v = fields.get(name)
        if v is not None and not isinstance(v, str):
            bad.append(f"{name} is {_show(v)}, not UTF-8 text")
    for name in ("payload", "metadata"):
        if name in fields and not isinstance(fields[name], bytes | str):
            bad.append(f"{name} is {_show(fields[name])}, not stored text")
    return PREFIX + "; ".join(bad) if bad else None


def _placeholder(name: str, value: Any) -> Any:
    if name in INT_FIELDS:
        return value if type(value) is int else 0
    if name in _OPTIONAL_INT_FIELDS:
        return value if value is None or type(value) is int else None
    if name == "payload":
        return value if isinstance(value, bytes | str) else b""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if name in _TEXT_FIELDS:
        return value if isinstance(value, str) else ("" if value is None else str(value))
    return value if value is None or isinstance(value, str) else str(value)


def snapshot(fields: Mapping[str, Any]) -> ActivitySnapshot:
    """The snapshot of a stored row: as stored when it decodes, else with placeholders and ``corrupt`` set.

    Parameters
    ----------
    fields : mapping of str to object
        Every :class:`~runnerq_fast.models.ActivitySnapshot` field but ``corrupt``, ``metadata`` as stored
        (JSON text): the snapshot holds it decoded, ``{}`` (and the reason in ``corrupt``) when it does not decode.
    """
    why = reason(fields)
    metadata, bad = shown_metadata(fields["metadata"])
    if bad is not None:
        why = PREFIX + bad if why is None else f"{why}; {bad}"
    if why is None:
        return ActivitySnapshot(**{**fields, "metadata": metadata})
    shown: dict[str, Any] = {k: _placeholder(k, v) for k, v in fields.items()}
    shown["metadata"] = metadata
    return ActivitySnapshot(**shown, corrupt=why)
