"""Listing filters from query parameters or a JSON body, as one :class:`~runnerq_fast.models.ActivityFilter`.

Query parameters (``GET .../activities``, ``.../count``)::

    ?status=failed,dead_letter   (or repeated)   ?type=send_email
    ?priority=high,4             ?created_after=2025-01-01T00:00:00Z   ?created_before=...
    ?metadata=tenant=t1          (repeated: every pair must match)     ?parent_id=<id>
    ?ids=<id>,<id>

The JSON body of a bulk action (:class:`~runnerq_fast.web.wire.FilterSpec`)
takes the same names. Both are validated by
:func:`runnerq_fast.filters.check_filter`, the backends' own validator: a bad
value is a 422 and nothing is read or changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from starlette.datastructures import QueryParams

from runnerq_fast.errors import InvalidActivityError
from runnerq_fast.filters import check_filter
from runnerq_fast.models import ActivityFilter, Priority
from runnerq_fast.web.responses import ProblemError
from runnerq_fast.web.wire import TIME_PATTERN, FilterSpec, integral, parse_time

__all__ = ["FILTER_PARAMS", "filter_from_body", "filter_from_query", "parse_priority"]

FILTER_PARAMS = ("status", "type", "priority", "created_after", "created_before", "metadata", "parent_id", "ids")
"""The query parameters a listing filter reads."""

_PRIORITY_NAMES = {p.name.lower(): int(p) for p in Priority}


def parse_priority(value: float | str) -> int:
    """A priority given as 1-4 (``3.0`` is 3, as JSON has it) or a name (``low`` ... ``critical``).

    Raises
    ------
    InvalidActivityError
        For anything else.
    """
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _PRIORITY_NAMES:
            return _PRIORITY_NAMES[text]
        if text.isascii() and text.isdigit():  # "\u0663" is a digit to str.isdigit, not a priority
            value = int(text)
        else:
            raise InvalidActivityError(f"priority must be 1-4 or one of low, normal, high, critical; got {value!r}")
    value = integral(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4:
        raise InvalidActivityError(f"priority must be 1-4 or one of low, normal, high, critical; got {value!r}")
    return value


def _ms(when: datetime | None, what: str) -> int | None:
    if when is None:
        return None
    if when.tzinfo is None:
        raise InvalidActivityError(f"{what} needs a time zone offset (e.g. 2025-01-01T00:00:00Z)")
    ms = int(when.timestamp() * 1000)
    if ms < 0:
        raise InvalidActivityError(f"{what} must not be before 1970")
    return ms


def _time(text: str | None, what: str) -> datetime | None:
    return None if text is None else parse_time(text, TIME_PATTERN, what)


def _listed(params: QueryParams, name: str) -> list[str] | None:
    values = [v.strip() for raw in params.getlist(name) for v in raw.split(",") if v.strip()]
    return values or None


def _build(
    *,
    statuses: Iterable[str] | None,
    types: Iterable[str] | None,
    priorities: Iterable[float | str] | None,
    after: datetime | None,
    before: datetime | None,
    metadata: Iterable[tuple[str, str]],
    parent_id: str | None,
    ids: Iterable[str] | None,
) -> ActivityFilter:
    try:
        return check_filter(
            ActivityFilter(
                ids=None if ids is None else tuple(ids),
                statuses=None if statuses is None else tuple(statuses),
                activity_types=None if types is None else tuple(types),
                priorities=None if priorities is None else tuple(parse_priority(p) for p in priorities),
                created_after_ms=_ms(after, "created_after"),
                created_before_ms=_ms(before, "created_before"),
                metadata=tuple(metadata),
                parent_id=parent_id,
            )
        )
    except InvalidActivityError as exc:
        raise ProblemError(422, str(exc)) from None


def filter_from_query(params: QueryParams) -> ActivityFilter:
    """The filter a listing's query parameters describe (see the module docstring).

    Raises
    ------
    ProblemError
        422 for a bad value.
    """
    pairs: list[tuple[str, str]] = []
    for raw in params.getlist("metadata"):
        key, sep, value = raw.partition("=")
        if not sep or not key:
            raise ProblemError(422, f"metadata must be key=value, got {raw!r}")
        pairs.append((key, value))
    try:
        after = _time(params.get("created_after"), "created_after")
        before = _time(params.get("created_before"), "created_before")
    except InvalidActivityError as exc:
        raise ProblemError(422, str(exc)) from None
    return _build(
        statuses=_listed(params, "status"),
        types=_listed(params, "type"),
        priorities=_listed(params, "priority"),
        after=after,
        before=before,
        metadata=pairs,
        parent_id=params.get("parent_id") or None,
        ids=_listed(params, "ids"),
    )


def filter_from_body(spec: FilterSpec | None, ids: list[str] | None) -> ActivityFilter:
    """The filter of a bulk action's body: ``ids``, ``filter`` or both.

    Raises
    ------
    ProblemError
        422 when neither is given, or for a bad value.
    """
    if spec is None and ids is None:
        raise ProblemError(422, 'give "ids", a "filter", or both (an empty filter {} means every activity)')
    spec = spec or FilterSpec()
    try:
        after = _time(spec.created_after, "created_after")
        before = _time(spec.created_before, "created_before")
    except InvalidActivityError as exc:
        raise ProblemError(422, str(exc)) from None
    return _build(
        statuses=spec.status,
        types=spec.type,
        priorities=spec.priority,
        after=after,
        before=before,
        metadata=sorted((spec.metadata or {}).items()),
        parent_id=spec.parent_id,
        ids=ids,
    )
