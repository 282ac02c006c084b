"""What runs in a worker process, and the few numbers it shares with its supervisor.

A child is started by :class:`~runnerq_fast.supervisor.pool.Supervisor` with
the ``spawn`` start method and runs :func:`bootstrap`: it ignores SIGINT (a
Ctrl-C in a terminal reaches the whole process group; the supervisor forwards
it as one SIGTERM) and calls the function the CLI gave, which loads the engine
and awaits :func:`serve_child`. Every SIGTERM asks the engine for a graceful
stop (a repeated one changes nothing: stopping at once is the supervisor's
SIGKILL). The child tells the supervisor through a :class:`ChildLink` when
its engine has started and how many activities it finished.

A child watches its supervisor from its first import of the package on
(:mod:`runnerq_fast._lifeline`). If the supervisor dies before the child's
engine has started, the child ends at once: it has claimed nothing. Once the
engine runs, the child stops claiming at once, gives running activities
:data:`ORPHAN_GRACE` seconds, cancels the rest and releases them (and what it
claimed but had not started) to ``pending`` without counting an attempt,
flushes its acks, and exits; if that takes longer than
:data:`ORPHAN_EXIT_AFTER` seconds it exits anyway, and what it had not handed
back runs again once its lease expires (at-least-once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
from collections.abc import Callable
from multiprocessing.context import BaseContext
from typing import Any, TypeVar

from runnerq_fast import _lifeline
from runnerq_fast.engine import WorkerEngine

__all__ = [
    "ORPHAN_EXIT_AFTER",
    "ORPHAN_GRACE",
    "ChildLink",
    "bootstrap",
    "finished_activities",
    "rss_bytes",
    "serve_child",
]

log = logging.getLogger("runnerq_fast.supervisor")

A = TypeVar("A")

_READY, _ACTIVITIES = 0, 1

ORPHAN_GRACE = 0.1
"""Seconds running activities get to finish when the supervisor died (instead of the shutdown grace)."""

ORPHAN_EXIT_AFTER = 0.4
"""Seconds after noticing its supervisor's death at which a child exits whatever it is doing."""


class ChildLink:
    """Shared memory between the supervisor and one child (two 64-bit integers).

    Parameters
    ----------
    context : multiprocessing context
        The context the child is started with (the cells are created in it,
        before the child starts, and handed to it at spawn).
    """

    def __init__(self, context: BaseContext) -> None:
        self._cells: Any = context.RawArray("q", 2)
        self.supervisor_pid = os.getpid()

    @property
    def ready(self) -> bool:
        """Whether the child's engine has started (connected, claiming)."""
        return bool(self._cells[_READY])

    def mark_ready(self) -> None:
        """Called by the child once its engine has started."""
        self._cells[_READY] = 1

    @property
    def activities(self) -> int:
        """Activities the child finished (completed, retried, failed, dead-lettered), as last reported."""
        return int(self._cells[_ACTIVITIES])

    def report(self, activities: int) -> None:
        """Called by the child: publish its count of finished activities."""
        self._cells[_ACTIVITIES] = activities


def bootstrap(target: Callable[[A, ChildLink], None], args: A, link: ChildLink) -> None:
    """The ``multiprocessing`` target of every child: watch the supervisor, ignore SIGINT, run ``target(args, link)``.

    The watch began at the child's first import of the package (``spawn``);
    here it is started if it has not (``forkserver``) and moves to the
    parent's sentinel, a pipe only the supervisor writes to.
    """
    lifeline = _lifeline.watch(link.supervisor_pid, parent_is_supervisor=os.getppid() == link.supervisor_pid)
    parent = multiprocessing.parent_process()
    if parent is not None and parent.pid == link.supervisor_pid:
        lifeline.use_sentinel(parent.sentinel)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    target(args, link)


def finished_activities(stats: dict[str, int]) -> int:
    """Activities an engine finished, from :attr:`WorkerEngine.stats` (late acks it refused not counted)."""
    return stats["completed"] + stats["retried"] + stats["failed"] + stats["dead_letter"]


async def serve_child(engine: WorkerEngine, link: ChildLink, *, report_interval: float = 0.2) -> None:
    """Run ``engine`` in a supervised child until SIGTERM, reporting to the supervisor.

    Parameters
    ----------
    engine : WorkerEngine
        Configured and not started.
    link : ChildLink
        Where the child reports that it started and how many activities it finished.
    report_interval : float
        Seconds between two reports (default 0.2).

    Notes
    -----
    In a child that watches its supervisor (:func:`bootstrap`), a death of
    the supervisor before :meth:`WorkerEngine.start` returned ends the
    process at once; after it, the engine stops within
    :data:`ORPHAN_EXIT_AFTER` seconds (see the module's docstring).

    Raises
    ------
    Exception
        Whatever :meth:`WorkerEngine.start` raises (the child then exits non-zero).
    """
    loop = asyncio.get_running_loop()
    # installed before start(), so a SIGTERM while the backend opens still ends in a graceful stop;
    # kept until the engine has stopped, so a repeated SIGTERM never kills the child half-way
    loop.add_signal_handler(signal.SIGTERM, _stop_on_signal, engine)
    reporter: asyncio.Task[None] | None = None
    lifeline = _lifeline.current()
    try:
        await engine.start()
        # nothing has been claimed yet (the fetcher runs at the next await): from here on a supervisor's
        # death must stop the engine cleanly, no longer end the process
        if lifeline is not None:
            lifeline.on_death(lambda: loop.call_soon_threadsafe(_stop_orphan, engine, link),
                              exit_after=ORPHAN_EXIT_AFTER)
        link.mark_ready()
        reporter = asyncio.create_task(_report(engine, link, report_interval), name="runnerq-supervisor-report")
        await engine.run_until_stopped(handle_signals=False)
    finally:
        if reporter is not None:
            reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reporter
            link.report(finished_activities(engine.stats))
        loop.remove_signal_handler(signal.SIGTERM)
        if lifeline is not None and lifeline.orphaned:
            logging.shutdown()
            lifeline.exit_now()


def _stop_on_signal(engine: WorkerEngine) -> None:
    log.info("worker process %d received SIGTERM; stopping gracefully", os.getpid())
    engine.request_stop()


def _stop_orphan(engine: WorkerEngine, link: ChildLink) -> None:
    log.warning("worker process %d: supervisor %d is gone; claiming nothing more, stopping within %g s "
                "(running activities get %g s, then are cancelled and released)", os.getpid(), link.supervisor_pid,
                ORPHAN_EXIT_AFTER, ORPHAN_GRACE)
    engine.request_stop(grace=ORPHAN_GRACE)


async def _report(engine: WorkerEngine, link: ChildLink, interval: float) -> None:
    while True:
        link.report(finished_activities(engine.stats))
        await asyncio.sleep(interval)


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes(pid: int) -> int | None:
    """Resident set size of process ``pid`` in bytes, from ``/proc/<pid>/statm``.

    Returns
    -------
    int or None
        ``None`` if the process is gone or ``/proc`` is not available (not Linux).
    """
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            fields = fh.read().split()
    except OSError:
        return None
    return int(fields[1]) * _PAGE_SIZE
