"""The arguments of one ``lua/enqueue.lua`` call (pure-Python reference implementation).

A batch usually repeats the same options (type, priority, retries, timeout, start
time, metadata, idempotency behaviour and ttl, parent) for every item, so they go
once per distinct combination, a *profile*, and each item sends only what is its
own::

    K, profile 1 (9 fields), ..., profile K,
    then per item: id, payload, [its profile, 1-based, only when K > 1],
                   [its idempotency key, only when its profile's on_duplicate > 0]

Profile fields, in order: ``activity_type``, ``priority``, ``max_retries``,
``timeout_ms``, ``run_at_ms``, ``metadata``, ``on_duplicate`` (``0`` when the item
has no idempotency key), ``idempotency_ttl_ms``, ``parent_id`` (``""`` for none).
Numbers are sent as ``int`` (an ``IntEnum`` member would be packed as its name).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runnerq_fast.models import NewActivity

__all__ = ["enqueue_args"]

#: Fields per profile in the argument list.
PROFILE_FIELDS = 9


def enqueue_args(items: Sequence[NewActivity]) -> list[Any]:
    """The ``ARGV`` of one ``enqueue.lua`` call for ``items`` (layout in the module docstring).

    Parameters
    ----------
    items : sequence of NewActivity
        The activities of one script call, at least one.

    Returns
    -------
    list
        ``str``, ``bytes`` and ``int`` values, in ``ARGV`` order.

    Raises
    ------
    TypeError, ValueError
        If a numeric field of an item is not a number (``int()`` fails on it).
    """
    index: dict[tuple[Any, ...], int] = {}
    profiles: list[Any] = []
    body: list[Any] = []
    keyed: list[bool] = []
    for it in items:
        key = it.idempotency_key
        prof = (
            it.activity_type,
            it.priority,
            it.max_retries,
            it.timeout_ms,
            it.run_at_ms,
            it.metadata,
            it.on_duplicate if key is not None else 0,
            it.idempotency_ttl_ms,
            it.parent_id,
        )
        n = index.get(prof)
        if n is None:
            n = index[prof] = len(index) + 1
            on_dup = int(prof[6])
            profiles += (
                prof[0],
                int(prof[1]),
                int(prof[2]),
                int(prof[3]),
                int(prof[4]),
                prof[5],
                on_dup,
                int(prof[7]),
                prof[8] if prof[8] is not None else "",
            )
            keyed.append(on_dup > 0)
        body.append(it.id)
        body.append(it.payload)
        body.append(n)
        if keyed[n - 1]:
            body.append(key)
    if len(index) == 1:  # no profile numbers: every item has profile 1
        del body[2 :: 4 if keyed[0] else 3]
    return [len(index), *profiles, *body]
