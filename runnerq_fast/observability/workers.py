"""Live workers and the activity types no live worker handles.

An activity type is *unhandled* when it has ready work (pending, or scheduled
and retrying activities that are due) but no live engine of its queue claims
it: a typo in a type, or a handler missing from every deployed worker, which
would otherwise leave activities pending forever without a word.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from runnerq_fast.models import ReadyWork, WorkerInfo
from runnerq_fast.storage import Backend

__all__ = ["UnhandledType", "find_unhandled_types", "unhandled_types"]


class UnhandledType(msgspec.Struct, frozen=True):
    """An activity type with ready work and no live worker claiming it.

    Attributes
    ----------
    activity_type : str
        The type.
    ready : int
        Its activities a worker could claim now.
    """

    activity_type: str
    ready: int


def unhandled_types(ready: ReadyWork, workers: Iterable[WorkerInfo]) -> list[UnhandledType]:
    """The types of ``ready`` that none of ``workers`` claims, most ready first (then by name).

    Parameters
    ----------
    ready : ReadyWork
        What a worker could claim now (:meth:`~runnerq_fast.storage.Backend.ready_work`).
    workers : iterable of WorkerInfo
        The live workers of the same queue; one claiming ``"*"`` handles every type.
    """
    handled: set[str] = set()
    for w in workers:
        if "*" in w.activity_types:
            return []
        handled.update(w.activity_types)
    out = [UnhandledType(t, n) for t, n in ready.by_type.items() if n > 0 and t not in handled]
    out.sort(key=lambda u: (-u.ready, u.activity_type))
    return out


async def find_unhandled_types(backend: Backend, queue: str) -> list[UnhandledType]:
    """:func:`unhandled_types` of ``queue`` as the backend holds it now (two backend calls)."""
    return unhandled_types(await backend.ready_work(queue), await backend.list_workers(queue))
