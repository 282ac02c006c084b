"""Lifecycle hooks (the Rainier worker events), what they are given, and how they are called."""

from __future__ import annotations

import inspect
import logging
from typing import Any

import msgspec

from runnerq_fast.codec import decode_json
from runnerq_fast.models import ClaimedActivity

__all__ = ["ActivityInfo", "LifecycleHooks", "activity_info"]

log = logging.getLogger("runnerq_fast.engine")


class ActivityInfo(msgspec.Struct, frozen=True):
    """One attempt of an activity, as lifecycle hooks and :func:`~runnerq_fast.current_activity` see it.

    Made only when a hook is registered (or on request), never on the plain
    per-activity path.

    Attributes
    ----------
    id : str
        The activity's id (32 hex digits).
    activity_type : str
        Its type.
    priority : int
        1 (LOW) to 4 (CRITICAL).
    retry_count : int
        Retries made before this attempt (0 on the first run).
    max_retries : int
        Retries allowed after the first attempt.
    timeout : float
        Handler timeout in **seconds**; 0 means none.
    enqueued_at : float
        Creation time, epoch **seconds**.
    metadata : dict of str to str
        The activity's metadata.
    result : object
        ``on_processed`` only: what the handler returned, the Python object
        itself (before it is encoded to JSON); ``None`` elsewhere.
    exception : BaseException or None
        ``on_released``, ``on_failed`` and ``on_dead_letter``: what the
        handler raised, with its ``__traceback__`` (and ``__cause__``,
        ``__context__``); ``None`` when no handler raised (an unknown type, a
        payload that does not decode, a result that cannot be encoded) and
        in the other hooks.
    traceback : str or None
        The traceback text stored with the attempt (the same hooks, when
        ``exception`` is set): bounded, from the handler's frame down (see
        :attr:`~runnerq_fast.models.ActivitySnapshot.traceback`).
    """

    id: str
    activity_type: str
    priority: int
    retry_count: int
    max_retries: int
    timeout: float
    enqueued_at: float
    metadata: dict[str, str]
    result: Any = None
    exception: BaseException | None = None
    traceback: str | None = None

    @property
    def attempt(self) -> int:
        """This attempt's number, 1 on the first run."""
        return self.retry_count + 1


def _metadata(raw: bytes | str) -> dict[str, str]:
    if not raw or raw in (b"{}", "{}"):
        return {}
    try:
        decoded = decode_json(raw)
    except Exception:  # a hook must still run for an activity whose metadata is damaged
        return {}
    return decoded if isinstance(decoded, dict) else {}


def activity_info(
    a: ClaimedActivity, result: Any = None, exception: BaseException | None = None, traceback: str | None = None
) -> ActivityInfo:
    """The public description of the claimed activity ``a`` (with a hook's outcome: see :class:`ActivityInfo`)."""
    return ActivityInfo(
        a.id,
        a.activity_type,
        a.priority,
        a.retry_count,
        a.max_retries,
        a.timeout_ms / 1000.0,
        a.created_at_ms / 1000.0,
        _metadata(a.metadata),
        result,
        exception,
        traceback,
    )


class LifecycleHooks:
    """Subclass and override what you need; every method may be sync or async.

    A hook that raises is logged and ignored: it never fails the activity.
    ``on_processing`` and ``on_processed`` run on the worker task around the
    handler, before the ack is flushed; the others run in a task of their own
    once the outcome is buffered. Each is given an :class:`ActivityInfo`:
    ``on_processed`` finds the handler's return value in its ``result``, the
    failure hooks (``on_released``, ``on_failed``, ``on_dead_letter``) the
    exception the handler raised in its ``exception`` (with
    ``__traceback__``) and the stored traceback text in its ``traceback``.
    (Fields rather than new parameters: the overrides written for these
    signatures keep working and type-checking.)
    """

    def on_processing(self, activity: ActivityInfo) -> Any:
        """Before the handler runs."""

    def on_processed(self, activity: ActivityInfo, duration: float) -> Any:
        """After the handler succeeded; ``duration`` in seconds."""

    def on_released(self, activity: ActivityInfo, delay: float, error: str) -> Any:
        """After a failed attempt that will be retried in ``delay`` seconds."""

    def on_failed(self, activity: ActivityInfo, error: str) -> Any:
        """After a non-retryable failure (status ``failed``)."""

    def on_dead_letter(self, activity: ActivityInfo, error: str) -> Any:
        """After the last allowed attempt failed (status ``dead_letter``)."""


async def call_hooks(
    hooks: tuple[LifecycleHooks, ...],
    name: str,
    a: ClaimedActivity,
    *args: Any,
    result: Any = None,
    exception: BaseException | None = None,
    traceback: str | None = None,
) -> None:
    """Call hook ``name`` on each of ``hooks`` with ``a`` as an :class:`ActivityInfo`, logging and swallowing errors.

    ``result``, ``exception`` and ``traceback`` go into the :class:`ActivityInfo`.
    """
    info = activity_info(a, result, exception, traceback)
    for h in hooks:
        try:
            res = getattr(h, name)(info, *args)
            if inspect.isawaitable(res):
                await res
        except Exception:
            log.exception("lifecycle hook %s.%s failed; ignored", type(h).__name__, name)
