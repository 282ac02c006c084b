"""Which activity is running here: a context variable set around each attempt, and logging on top of it.

The per-activity path (:mod:`runnerq_fast.engine.worker`) sets
:data:`running` to the claimed activity at the start of each attempt, in the
worker task's own context, so it holds for the whole attempt — the handler,
its lifecycle hooks, the engine's own log lines about the outcome — and for
whatever the attempt starts: tasks it creates and plain ``def`` handlers'
threads (:meth:`~runnerq_fast.engine.outcomes.Outcomes.call_sync`) run in a
copy of that context. Each worker task has a context of its own, so
activities running at once never see each other's. It is not reset after an
attempt (a worker task runs nothing else before the next one sets it again):
one ``ContextVar.set`` per activity, the only cost on the hot path.

On top of it:

* :class:`ActivityLogFilter` adds ``activity_id``, ``activity_type`` and
  ``attempt`` to every record it sees (``None`` outside an activity);
* :func:`install_log_context` puts that filter on the root logger's
  handlers (or the ones given);
* :func:`current_activity` tells code called from a handler which activity it runs for.
"""

from __future__ import annotations

import contextvars
import logging

from runnerq_fast.engine.hooks import ActivityInfo, activity_info
from runnerq_fast.models import ClaimedActivity

__all__ = ["ActivityLogFilter", "current_activity", "install_log_context", "running"]

running: contextvars.ContextVar[ClaimedActivity | None] = contextvars.ContextVar("runnerq_activity", default=None)
"""The activity whose attempt is running in this context (``None`` outside one). Set by the engine only."""



class ActivityLogFilter(logging.Filter):
    """Adds the running activity to each log record (a filter that never drops one).

    Sets ``record.activity_id`` (str), ``record.activity_type`` (str) and
    ``record.attempt`` (int, 1 on the first run) while an activity runs in
    the logging call's context, and ``None`` for each outside one, so formats
    such as ``"%(activity_type)s %(activity_id)s #%(attempt)s %(message)s"``
    never fail. A value the call gave through ``extra=`` is kept.

    Attach it to a *handler* (``handler.addFilter(rq.ActivityLogFilter())``,
    or ``{"()": "runnerq_fast.ActivityLogFilter"}`` under ``filters`` in a
    :func:`logging.config.dictConfig`): a filter on a logger sees only the
    records logged on that very logger, not its children's. It must run in
    the logging call's thread: on a ``QueueHandler``, not on its listener's
    handlers.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        fields = record.__dict__
        a = running.get()
        if a is None:
            fields.setdefault("activity_id", None)
            fields.setdefault("activity_type", None)
            fields.setdefault("attempt", None)
        else:
            fields.setdefault("activity_id", a.id)
            fields.setdefault("activity_type", a.activity_type)
            fields.setdefault("attempt", a.retry_count + 1)
        return True


def install_log_context(*handlers: logging.Handler) -> list[logging.Handler]:
    """Add an :class:`ActivityLogFilter` to ``handlers``, by default to every handler of the root logger.

    Call it after logging is configured (``logging.basicConfig``,
    ``dictConfig``): records of every logger that propagate to those
    handlers then carry ``activity_id``, ``activity_type`` and ``attempt``.
    A handler that has one already is left as it is, so calling it twice is harmless.

    Parameters
    ----------
    *handlers : logging.Handler
        Where to add the filter; none given: ``logging.getLogger().handlers``.

    Returns
    -------
    list of logging.Handler
        The handlers that now have the filter (empty if the root logger has none).
    """
    targets = list(handlers) if handlers else list(logging.getLogger().handlers)
    for h in targets:
        if not any(isinstance(f, ActivityLogFilter) for f in h.filters):
            h.addFilter(ActivityLogFilter())
    return targets


def current_activity() -> ActivityInfo | None:
    """The activity whose handler (or lifecycle hook) is running in this context, or ``None``.

    Works in ``async def`` handlers, in plain ``def`` ones (their thread runs
    in a copy of the worker's context) and in anything they call.

    Returns
    -------
    ActivityInfo or None
        A new description of the activity on each call.
    """
    a = running.get()
    return None if a is None else activity_info(a)
