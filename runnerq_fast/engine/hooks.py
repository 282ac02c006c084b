"""Lifecycle hooks (the Rainier worker events) and how they are called."""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runnerq_fast.models import ClaimedActivity

__all__ = ["LifecycleHooks"]

log = logging.getLogger("runnerq_fast.engine")


class LifecycleHooks:
    """Subclass and override what you need; every method may be sync or async.

    A hook that raises is logged and ignored: it never fails the activity.
    Hooks run on the worker task after the handler returns, before the ack
    is flushed.
    """

    def on_processing(self, activity: ClaimedActivity) -> Any:
        """Before the handler runs."""

    def on_processed(self, activity: ClaimedActivity, duration: float) -> Any:
        """After the handler succeeded; ``duration`` in seconds."""

    def on_released(self, activity: ClaimedActivity, delay: float, error: str) -> Any:
        """After a failed attempt that will be retried in ``delay`` seconds."""

    def on_failed(self, activity: ClaimedActivity, error: str) -> Any:
        """After a non-retryable failure (status ``failed``)."""

    def on_dead_letter(self, activity: ClaimedActivity, error: str) -> Any:
        """After the last allowed attempt failed (status ``dead_letter``)."""


async def call_hooks(hooks: tuple[LifecycleHooks, ...], name: str, *args: Any) -> None:
    """Call hook ``name`` on each of ``hooks``, logging and swallowing errors."""
    for h in hooks:
        try:
            res = getattr(h, name)(*args)
            if inspect.isawaitable(res):
                await res
        except Exception:
            log.exception("lifecycle hook %s.%s failed; ignored", type(h).__name__, name)
