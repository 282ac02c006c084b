"""Retention: deleting finished activities and old events in short batches (the Python API).

:func:`prune` is what ``runnerq-fast prune`` and the engine's automatic
pruner (:mod:`runnerq_fast.engine.pruner`) run: it calls
:meth:`~runnerq_fast.storage.Backend.prune` and
:meth:`~runnerq_fast.storage.Backend.prune_events` batch after batch, each
batch its own short transaction (one Lua call on Redis), so it never holds
a long lock, and yields to the event loop between batches.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence

import msgspec

from runnerq_fast.config import MAX_DELAY_SECONDS
from runnerq_fast.errors import InvalidActivityError
from runnerq_fast.storage import MOST_PRUNED, Backend, check_prune

__all__ = ["FINISHED_STATUSES", "PruneReport", "prune", "seconds_to_ms"]

FINISHED_STATUSES = ("completed", "failed", "dead_letter", "cancelled")
"""The statuses a prune may delete; any other activity is never pruned."""


class PruneReport(msgspec.Struct, frozen=True):
    """What one :func:`prune` call deleted.

    Attributes
    ----------
    queue : str
        The queue pruned.
    activities : int
        Finished activities deleted (with their events and idempotency keys).
    events : int
        Old events deleted on their own (``events_older_than``); on
        PostgreSQL a count of event batch rows, each naming one or more
        activities; always 0 on Redis.
    batches : int
        Backend calls made (each one short transaction).
    seconds : float
        Wall time of the call, seconds.
    complete : bool
        ``False`` when ``max_batches`` stopped it with more left to delete.
    """

    queue: str
    activities: int
    events: int
    batches: int
    seconds: float
    complete: bool = True


def seconds_to_ms(seconds: float, what: str) -> int:
    """``seconds`` (a finite number in [0, 100 years]) as whole milliseconds, else :class:`InvalidActivityError`.

    The bound is the retention settings' (:data:`runnerq_fast.config.MAX_DELAY_SECONDS`): a larger age
    overflowed SQLite's and PostgreSQL's 64-bit integers.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) \
            or not 0 <= seconds <= MAX_DELAY_SECONDS:
        raise InvalidActivityError(f"{what} must be a finite number of seconds in [0, {MAX_DELAY_SECONDS:.0f}] "
                                   f"(100 years), got {seconds!r}")
    return round(seconds * 1000)


async def prune(
    backend: Backend,
    queue: str,
    *,
    older_than: float,
    statuses: Sequence[str] = FINISHED_STATUSES,
    events_older_than: float | None = None,
    batch_size: int = 1000,
    max_batches: int | None = None,
    pause: float = 0.0,
) -> PruneReport:
    """Delete the finished activities of ``queue`` older than ``older_than`` seconds, in batches.

    An activity's age is the time since it finished (completed, failed,
    dead-lettered or cancelled); pending, scheduled, processing and retrying
    activities are never deleted. Each pruned activity goes with its events
    and its idempotency key: a later enqueue with that key creates a new
    activity. Children of a pruned activity keep their ``parent_id``.

    Parameters
    ----------
    backend : Backend
        The store.
    queue : str
        Queue name.
    older_than : float
        Minimum age, seconds, >= 0 (0: everything finished until now).
    statuses : sequence of str
        Which finished statuses to prune. Default all four.
    events_older_than : float, optional
        Also delete the queue's events older than this many seconds, even of
        activities still stored (their oldest timeline entries). ``None``
        (default): only the events of pruned activities go.
    batch_size : int
        Activities (or events) per batch, 1-100,000. Default 1,000.
    max_batches : int, optional
        Stop after this many batches (``complete=False`` if more was left). Default: until done.
    pause : float
        Seconds to sleep between batches (eases the load on a busy store). Default 0.

    Returns
    -------
    PruneReport

    Raises
    ------
    InvalidActivityError
        For an unknown or unfinished status, a negative or non-finite age, or a
        bad ``batch_size`` / ``max_batches`` / ``pause``, or no status and no
        ``events_older_than`` (nothing is deleted).
    """
    age_ms = seconds_to_ms(older_than, "older_than")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MOST_PRUNED:
        raise InvalidActivityError(f"batch_size must be an int in [1, {MOST_PRUNED}], got {batch_size!r}")
    wanted = check_prune(statuses, age_ms, batch_size)
    if not wanted and events_older_than is None:
        raise InvalidActivityError("statuses names no status: give at least one finished status, "
                                   "or events_older_than to prune only events")
    if isinstance(pause, bool) or not isinstance(pause, int | float) or not 0 <= pause < math.inf:
        raise InvalidActivityError(f"pause must be a finite number of seconds >= 0, got {pause!r}")
    events_ms = None if events_older_than is None else seconds_to_ms(events_older_than, "events_older_than")
    if max_batches is not None and (isinstance(max_batches, bool) or not isinstance(max_batches, int)
                                    or max_batches < 1):
        raise InvalidActivityError(f"max_batches must be an int >= 1 or None, got {max_batches!r}")
    started = time.perf_counter()
    activities = events = batches = 0
    complete = True

    async def more() -> bool:
        nonlocal complete
        if max_batches is not None and batches >= max_batches:
            complete = False
            return False
        if batches:
            await asyncio.sleep(pause)  # also lets the loop's other tasks run between batches
        return True

    while wanted and await more():
        n = await backend.prune(queue, wanted, age_ms, limit=batch_size)
        batches += 1
        activities += n
        if n < batch_size:
            break
    while events_ms is not None and complete and await more():
        n = await backend.prune_events(queue, events_ms, limit=batch_size)
        batches += 1
        events += n
        if n < batch_size:
            break
    return PruneReport(queue, activities, events, batches, time.perf_counter() - started, complete)
