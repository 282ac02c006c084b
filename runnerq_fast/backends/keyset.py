"""Keyset paging and bounded counting over rows already in ``(created, id)`` order.

A backend turns a filter into one or more ordered sources (an index range
each), merges them with :func:`merged`, and lets :func:`page` or
:func:`count` walk the merge: they apply the conditions checked row by row
(priority, metadata) and stop after a bounded number of rows, so no request
walks every finished row of a queue. Rows are whatever the backend reads
(tuples, objects); ``key`` gives a row's ``(created, id)`` and ``ok`` whether
it passes the row-by-row conditions.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from runnerq_fast.filters import ROW_SCAN_LIMIT
from runnerq_fast.models import ActivityCount

__all__ = ["count", "merged", "page"]

R = TypeVar("R")

Key = tuple[int, str]


def merged(sources: Iterable[Iterable[R]], key: Callable[[R], Key], newest_first: bool) -> Iterator[R]:
    """Merge sources that are each ordered by ``key`` (descending if ``newest_first``) into one such order."""
    lists = list(sources)
    if len(lists) == 1:
        return iter(lists[0])
    return heapq.merge(*lists, key=key, reverse=newest_first)


def page(
    rows: Iterable[R],
    limit: int,
    key: Callable[[R], Key],
    ok: Callable[[R], bool] | None,
    scan_limit: int = ROW_SCAN_LIMIT,
) -> tuple[list[R], Key | None]:
    """The first ``limit`` rows of ``rows`` that pass ``ok``, and the key to resume after.

    Parameters
    ----------
    rows : iterable
        Candidate rows in listing order (already past the cursor).
    limit : int
        Page size.
    key : callable
        ``(created, id)`` of a row.
    ok : callable or None
        The row-by-row conditions; ``None`` when there are none.
    scan_limit : int
        With ``ok``, stop after examining this many rows (default
        :data:`~runnerq_fast.filters.ROW_SCAN_LIMIT`).

    Returns
    -------
    (list, (int, str) or None)
        The page and the key of the last row it covers, or ``None`` when
        ``rows`` ran out (no further page).
    """
    items: list[R] = []
    examined = 0
    for row in rows:
        if ok is not None:
            examined += 1
            if not ok(row):
                if examined >= scan_limit:
                    return items, key(row)
                continue
        if len(items) == limit:
            return items, key(items[-1])
        items.append(row)
    return items, None


def count(
    rows: Iterable[R], cap: int, ok: Callable[[R], bool] | None, scan_limit: int = ROW_SCAN_LIMIT
) -> ActivityCount:
    """Count the rows that pass ``ok``, stopping at ``cap`` (or after ``cap + scan_limit`` rows examined)."""
    n = examined = 0
    for row in rows:
        if ok is not None:
            examined += 1
            if examined > cap + scan_limit:
                return ActivityCount(n, False)
            if not ok(row):
                continue
        if n == cap:
            return ActivityCount(n, False)
        n += 1
    return ActivityCount(n, True)
