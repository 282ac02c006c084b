"""Activity filters, keyset cursors and the statuses each operator action applies to.

Shared by every backend so they validate the same way, page the same way and
refuse the same bad input. Listings are ordered by ``(created_at, id)``
(newest first by default); a cursor is the key of the last row a page
examined, base64 of msgspec JSON, opaque to callers.

Which filter fields a backend serves from an index and which it checks row
by row (with a bounded number of rows examined per request,
:data:`ROW_SCAN_LIMIT`) is the backend's business; the results are the same.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from runnerq_fast.errors import InvalidActivityError
from runnerq_fast.models import READY_STATUSES, TERMINAL_STATUSES, ActivityFilter, ActivityStatus

__all__ = [
    "ACTIONS",
    "ALL_STATUSES",
    "COUNT_CAP",
    "MAX_ACTION_LIMIT",
    "MAX_IDS",
    "MAX_PAGE",
    "ROW_SCAN_LIMIT",
    "Cursor",
    "applicable",
    "check_action_limit",
    "check_filter",
    "check_page",
    "check_priority",
    "decode_cursor",
    "encode_cursor",
    "metadata_matches",
    "row_filters",
]

ALL_STATUSES: tuple[str, ...] = tuple(s.value for s in ActivityStatus)
"""Every status, in :class:`~runnerq_fast.models.ActivityStatus` order."""

MAX_IDS = 10_000
"""Most ids one filter may name."""

MAX_PAGE = 1000
"""Largest page a listing returns."""

MAX_ACTION_LIMIT = 100_000
"""Most activities one action call may change."""

COUNT_CAP = 10_000
"""Default bound of :meth:`~runnerq_fast.storage.Backend.count_activities`: it stops counting there."""

ROW_SCAN_LIMIT = 5_000
"""Most rows a listing or count examines for the fields it checks row by row
(priority, metadata), beyond those that match: a page may then come back short
with a cursor to continue from."""

ACTIONS: dict[str, frozenset[str]] = {
    "retry": frozenset({"failed", "dead_letter", "cancelled"}),
    "cancel": frozenset({"pending", "scheduled", "retrying", "processing"}),
    "run_now": frozenset({"scheduled", "retrying"}),
    "set_priority": READY_STATUSES,
    "delete": TERMINAL_STATUSES,
}
"""For each action, the statuses it applies to; every other status is skipped."""

_STATUS_SET = frozenset(ALL_STATUSES)
_CURSOR_VERSION = 1


class Cursor(msgspec.Struct, array_like=True, frozen=True):
    """The decoded position of a keyset cursor.

    Attributes
    ----------
    created : int
        The creation time of the last examined row, in the backend's own unit
        (milliseconds; microseconds on PostgreSQL).
    id : str
        Its id, the tie-breaker.
    newest_first : bool
        The order the cursor was made for.
    """

    created: int
    id: str
    newest_first: bool


class _Envelope(msgspec.Struct, array_like=True):
    v: int
    created: int
    id: str
    newest_first: bool


def encode_cursor(created: int, activity_id: str, newest_first: bool) -> str:
    """The opaque cursor for "after the row keyed ``(created, activity_id)``".

    Parameters
    ----------
    created : int
        The row's creation time in the backend's unit.
    activity_id : str
        The row's id.
    newest_first : bool
        The listing order.

    Returns
    -------
    str
        URL-safe base64 text without padding.
    """
    raw = msgspec.json.encode(_Envelope(_CURSOR_VERSION, int(created), activity_id, bool(newest_first)))
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(cursor: str | None, newest_first: bool) -> Cursor | None:
    """Decode a cursor made by :func:`encode_cursor` (``None`` stays ``None``).

    Raises
    ------
    InvalidActivityError
        If the text is not a cursor of this version, or was made for the
        other order.
    """
    if cursor is None:
        return None
    if not isinstance(cursor, str) or not cursor or len(cursor) > 200:
        raise InvalidActivityError(f"invalid cursor {cursor!r}")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        env = msgspec.json.decode(raw, type=_Envelope)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise InvalidActivityError(f"invalid cursor {cursor!r}") from None
    if env.v != _CURSOR_VERSION or not env.id or not 0 <= env.created < 2**63:
        # an out-of-range position would reach the store's integer type (SQLite, PostgreSQL bigint)
        raise InvalidActivityError(f"invalid cursor {cursor!r}")
    if env.newest_first != bool(newest_first):
        raise InvalidActivityError("the cursor was made for the other order (newest_first)")
    return Cursor(env.created, env.id, env.newest_first)


def _tuple(value: Any, what: str) -> tuple[Any, ...] | None:
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidActivityError(f"{what} must be a sequence, got {value!r}")
    return tuple(value)


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 255 or "\x00" in value:
        raise InvalidActivityError(f"invalid {what} {value!r}")
    return value


def _ms(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**47:
        raise InvalidActivityError(
            f"{what} must be epoch milliseconds between 0 and {2**47 - 1} (year 6429), got {value!r}"
        )
    return value


def check_filter(flt: ActivityFilter) -> ActivityFilter:
    """Validate ``flt`` and return it normalised (tuples, known values, no duplicates).

    Raises
    ------
    InvalidActivityError
        For an unknown status, a priority outside 1-4, a blank or over-long
        type, more than :data:`MAX_IDS` ids, a created time that is not a
        non-negative integer, a metadata pair that is not two strings, or a
        filter that is not an :class:`ActivityFilter`.
    """
    if not isinstance(flt, ActivityFilter):
        raise InvalidActivityError(f"filter must be an ActivityFilter, got {type(flt).__name__}")
    ids = _tuple(flt.ids, "ids")
    if ids is not None:
        if len(ids) > MAX_IDS:
            raise InvalidActivityError(f"a filter names at most {MAX_IDS} ids, got {len(ids)}")
        ids = tuple(dict.fromkeys(_name(i, "activity id") for i in ids))
    statuses = _tuple(flt.statuses, "statuses")
    if statuses is not None:
        bad = [s for s in statuses if s not in _STATUS_SET]
        if bad:
            raise InvalidActivityError(f"unknown status {bad[0]!r}; expected one of {list(ALL_STATUSES)}")
        statuses = tuple(s for s in ALL_STATUSES if s in set(statuses))
    types = _tuple(flt.activity_types, "activity_types")
    if types is not None:
        types = tuple(dict.fromkeys(_name(t, "activity type") for t in types))
    priorities = _tuple(flt.priorities, "priorities")
    if priorities is not None:
        priorities = tuple(sorted({check_priority(p) for p in priorities}))
    after = _ms(flt.created_after_ms, "created_after_ms")
    before = _ms(flt.created_before_ms, "created_before_ms")
    pairs = _tuple(flt.metadata, "metadata")
    metadata: list[tuple[str, str]] = []
    for pair in pairs or ():
        kv = _tuple(pair, "a metadata pair")
        if kv is None or len(kv) != 2 or not all(isinstance(x, str) for x in kv) or "\x00" in kv[0] + kv[1]:
            raise InvalidActivityError(f"a metadata condition must be a (key, value) pair of strings, got {pair!r}")
        metadata.append((kv[0], kv[1]))
    parent = None if flt.parent_id is None else _name(flt.parent_id, "parent id")
    return ActivityFilter(
        ids=ids,
        statuses=statuses,
        activity_types=types,
        priorities=priorities,
        created_after_ms=after,
        created_before_ms=before,
        metadata=tuple(dict.fromkeys(metadata)),
        parent_id=parent,
    )


def check_priority(priority: Any) -> int:
    """``priority`` as an int in 1-4, else :class:`InvalidActivityError`."""
    if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= 4:
        raise InvalidActivityError(f"priority must be 1-4 (Priority.LOW..CRITICAL), got {priority!r}")
    return int(priority)


def check_page(limit: Any, cursor: str | None, newest_first: Any) -> Cursor | None:
    """Validate a listing's ``limit`` (1-:data:`MAX_PAGE`) and decode its cursor.

    Raises
    ------
    InvalidActivityError
        For a limit out of range, a non-boolean ``newest_first`` or a bad cursor.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidActivityError(f"limit must be an int in [1, {MAX_PAGE}], got {limit!r}")
    if not isinstance(newest_first, bool):
        raise InvalidActivityError(f"newest_first must be a bool, got {newest_first!r}")
    return decode_cursor(cursor, newest_first)


def check_action_limit(limit: Any) -> int:
    """An action's ``limit`` (1-:data:`MAX_ACTION_LIMIT`), else :class:`InvalidActivityError`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_ACTION_LIMIT:
        raise InvalidActivityError(f"limit must be an int in [1, {MAX_ACTION_LIMIT}], got {limit!r}")
    return limit


def check_cap(cap: Any) -> int:
    """A count's ``cap`` (>= 1, at most :data:`MAX_ACTION_LIMIT`), else :class:`InvalidActivityError`."""
    if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_ACTION_LIMIT:
        raise InvalidActivityError(f"cap must be an int in [1, {MAX_ACTION_LIMIT}], got {cap!r}")
    return cap


def applicable(action: str, flt: ActivityFilter) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The statuses ``action`` changes and the ones it skips, within ``flt.statuses``.

    Returns
    -------
    (tuple of str, tuple of str)
        Statuses to act on and statuses matched but skipped, each in
        :data:`ALL_STATUSES` order.
    """
    wanted = ACTIONS[action]
    pool = flt.statuses if flt.statuses is not None else ALL_STATUSES
    return tuple(s for s in pool if s in wanted), tuple(s for s in pool if s not in wanted)


def row_filters(flt: ActivityFilter) -> bool:
    """Whether ``flt`` has conditions every backend checks row by row (priority, metadata)."""
    return flt.priorities is not None or bool(flt.metadata)


def metadata_matches(metadata: Mapping[str, Any] | None, pairs: tuple[tuple[str, str], ...]) -> bool:
    """Whether every ``(key, value)`` of ``pairs`` is in the decoded ``metadata`` object."""
    if not pairs:
        return True
    if not isinstance(metadata, Mapping):
        return False
    return all(metadata.get(k) == v for k, v in pairs)
