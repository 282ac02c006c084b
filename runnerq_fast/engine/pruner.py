"""The engine's automatic retention: a task that prunes finished activities and old events.

Every ``prune_interval`` seconds it asks the store for the queue's
``"prune"`` hold (:meth:`~runnerq_fast.storage.Backend.hold`, valid three
periods and renewed between chunks of batches), so however many workers
serve a queue, one of them prunes it at a time; when that worker stops,
another takes over once the hold ran out. A pass deletes, in batches of
``prune_batch_size`` (one short transaction each):

* completed and cancelled activities finished more than ``completed_retention`` ago;
* failed and dead-lettered ones finished more than ``failed_retention`` ago;
* events older than ``event_retention``;

and first runs the store's housekeeping (:meth:`~runnerq_fast.storage.Backend.maintain`).

A batch the store cancels (:class:`~runnerq_fast.errors.StoreBusyError`, e.g.
over PostgreSQL's ``statement_timeout``) was rolled back whole: the pass
goes on, after a short pause, with batches of half the size (down to one;
:class:`~runnerq_fast.engine.batching.AdaptiveBatch`), growing back with each
batch that lands. Housekeeping the store cancels is skipped until the next pass.

A setting of ``None`` keeps those forever; ``prune_interval = 0`` turns the
task off. A failing pass is logged and tried again next period.
"""

from __future__ import annotations

import asyncio
import logging

from runnerq_fast.config import WorkerConfig
from runnerq_fast.engine.batching import AdaptiveBatch
from runnerq_fast.errors import StoreBusyError
from runnerq_fast.observability.retention import PruneReport, prune
from runnerq_fast.resilience import busy_attempts
from runnerq_fast.storage import Backend

__all__ = ["PRUNE_HOLD", "Pruner"]

log = logging.getLogger("runnerq_fast.engine.pruner")

PRUNE_HOLD = "prune"
"""Purpose of the hold a pruner takes on its queue."""

_BATCHES_PER_HOLD = 20
"""Batches between two renewals of the hold (a long backlog outlives one hold period)."""

_BUSY_PAUSE = 0.05
"""Seconds before a cancelled batch is tried again, smaller (doubling while the store keeps cancelling)."""

_FIRST_PASS_AFTER = 1.0
"""Seconds after start before the first pass (at most ``prune_interval``)."""


class Pruner:
    """One queue's automatic retention (see the module docstring).

    Parameters
    ----------
    backend : Backend
        The store.
    config : WorkerConfig
        The engine's settings (queue, retentions, interval, batch size).
    holder : str
        Who takes the hold (the engine's worker id).
    """

    def __init__(self, backend: Backend, config: WorkerConfig, holder: str) -> None:
        self.backend = backend
        self.config = config
        self.holder = holder
        self.passes = 0
        self.batch = AdaptiveBatch(config.prune_batch_size)

    @property
    def _hold_ms(self) -> int:
        return max(1000, round(self.config.prune_interval * 3000))

    async def _hold(self) -> bool:
        cfg = self.config
        return await self.backend.hold(cfg.queue_name, PRUNE_HOLD, self.holder, self._hold_ms)

    async def run_once(self) -> list[PruneReport] | None:
        """One pass; ``None`` if another worker holds the queue's pruning.

        Returns
        -------
        list of PruneReport or None
            One report per kind pruned (completed, failed, events), in that order.
        """
        cfg = self.config
        if not await self._hold():
            return None
        try:
            with busy_attempts(1):
                await self.backend.maintain()
        except StoreBusyError as exc:
            log.warning("housekeeping of queue %r cancelled by the store (%s); pruning anyway", cfg.queue_name, exc)
        groups: list[tuple[tuple[str, ...], float | None, float | None]] = [
            (("completed", "cancelled"), cfg.completed_retention, None),
            (("failed", "dead_letter"), cfg.failed_retention, None),
            ((), None, cfg.event_retention),
        ]
        reports: list[PruneReport] = []
        for statuses, kept, events_kept in groups:
            if (statuses and kept is None) or (not statuses and events_kept is None):
                continue
            pause = _BUSY_PAUSE
            while True:
                size = self.batch.size
                try:
                    with busy_attempts(1):
                        report = await prune(
                            self.backend, cfg.queue_name, statuses=statuses, older_than=kept or 0.0,
                            events_older_than=events_kept, batch_size=size, max_batches=_BATCHES_PER_HOLD,
                        )
                except StoreBusyError as exc:
                    if size == 1:
                        raise  # even one row at a time is cancelled: try again next pass
                    smaller = self.batch.cancelled(size)
                    log.warning("prune batch of %d cancelled by the store (%s); nothing was applied, trying %d "
                                "in %.2f s", size, exc, smaller, pause)
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 1.0)
                    continue
                pause = _BUSY_PAUSE
                self.batch.succeeded()
                reports.append(report)
                if report.complete or not await self._hold():
                    break
        self.passes += 1
        deleted = sum(r.activities for r in reports)
        events = sum(r.events for r in reports)
        if deleted or events:
            log.info("pruned queue %r: %d finished activities, %d old events in %.2f s", cfg.queue_name, deleted,
                     events, sum(r.seconds for r in reports))
        return reports

    async def run(self) -> None:
        """Prune every ``prune_interval`` seconds until cancelled."""
        interval = self.config.prune_interval
        await asyncio.sleep(min(interval, _FIRST_PASS_AFTER))
        while True:
            try:
                await self.run_once()
            except Exception as exc:
                log.warning("prune pass of queue %r failed (%s: %s); trying again in %.0f s",
                            self.config.queue_name, type(exc).__name__, exc, interval)
            await asyncio.sleep(interval)
