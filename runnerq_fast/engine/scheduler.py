"""Periodic schedules: one activity per tick, whatever the number of engines.

A :class:`Schedule` is a cron expression (parsed by `cronsim`_, evaluated in
an IANA timezone) or a fixed interval in seconds. Every engine that has the
schedule registered runs one :func:`run_schedules` task: it sleeps until the
next tick (no polling) and enqueues that tick's activity with ``run_at`` = the
tick time and the idempotency key ``periodic:<name>:<tick epoch ms>``
(:attr:`OnDuplicate.RETURN_EXISTING`). Every process computes the same ticks
from the same clock, so the first enqueue of a tick creates the activity and
the others get the existing one back: exactly one activity per tick across
any number of processes and hosts, by the backend's atomic idempotency (as
long as the key outlives the catch-up window, see :func:`key_ttl_ms`).

A tick is enqueued as usual while it is at most its *late limit* behind
(the time to the next tick, at least 1 s and at most 60 s: a slow enqueue
or a busy loop delays a tick, it does not lose it). Missed ticks — no engine
was running at the tick, or the scheduler fell further behind than that —
follow the schedule's ``missed`` policy:

``"skip"`` (default)
    A tick whose time passed while no scheduler could enqueue it is not run.
    An engine starting at ``t`` enqueues from the first tick after ``t``.
``"run_once"``
    At start (and after falling behind), the most recent tick at or before
    now is enqueued if it is at most ``catch_up`` seconds old — at most one
    activity for all the ticks missed, none if that tick already ran (its
    key is still remembered). Older ticks are skipped.

Ticks of an interval schedule are aligned to the Unix epoch (``every=60``
ticks at every whole UTC minute), so every process agrees on them. Cron
ticks have one-second resolution (5-field or 6-field expressions, the 6th
being seconds first, as cronsim reads them).

.. _cronsim: https://pypi.org/project/cronsim/
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
from cronsim import CronSim, CronSimError

from runnerq_fast.codec import encode_payload
from runnerq_fast.errors import ConfigError, InvalidActivityError
from runnerq_fast.executor import check_type_options
from runnerq_fast.models import OnDuplicate, Priority

if TYPE_CHECKING:
    from runnerq_fast.executor import ActivityExecutor

__all__ = ["MISSED_POLICIES", "Schedule", "key_ttl_ms", "late_limit", "make_schedule", "run_schedules", "tick_key"]

log = logging.getLogger("runnerq_fast.scheduler")

MISSED_POLICIES = ("skip", "run_once")
"""Accepted values of :attr:`Schedule.missed`."""

_MIN_INTERVAL = 0.01

LATE_MIN = 1.0
"""Seconds any tick may be late and still be enqueued as usual (see :func:`late_limit`)."""

LATE_MAX = 60.0
"""Most seconds a tick may be late and still be enqueued as usual, however far apart the ticks are."""


class Schedule(msgspec.Struct, frozen=True, kw_only=True):
    """One periodic schedule registered with :meth:`WorkerEngine.periodic`.

    Attributes
    ----------
    name : str
        Unique within the engine; part of every tick's idempotency key and of
        the activities' metadata (``{"schedule": name}``). Default: the
        activity type.
    activity_type : str
        Type of the activity enqueued at each tick.
    cron : str or None
        The cron expression (``None`` for an interval schedule).
    every : float or None
        The interval in **seconds** (``None`` for a cron schedule).
    timezone : str
        IANA name the cron expression is evaluated in (``"UTC"`` for intervals).
    payload : Any
        Payload of every tick's activity: JSON values or typed values (see
        :func:`runnerq_fast.codec.encode_payload`).
    priority : int or None
        1-4; ``None``: the type's default (``@engine.activity(priority=...)``), else NORMAL.
    max_retries : int or None
        Retries after the first attempt; ``None``: the type's default, else the engine's.
    timeout : float or None
        Handler timeout in **seconds** (0 = none); ``None``: the type's default, else the engine's.
    missed : str
        ``"skip"`` or ``"run_once"`` (see the module docstring).
    catch_up : float
        With ``"run_once"``: the oldest missed tick still run at start, seconds.
    metadata : dict of str to str
        Extra metadata of every activity. Each activity also carries
        ``schedule`` (the name) and ``tick`` (the tick time, ISO 8601 UTC with
        milliseconds, e.g. ``2026-01-01T00:00:00.000+00:00``).
    """

    name: str
    activity_type: str
    cron: str | None = None
    every: float | None = None
    timezone: str = "UTC"
    payload: Any = None
    priority: int | None = None
    max_retries: int | None = None
    timeout: float | None = None
    missed: str = "skip"
    catch_up: float = 86400.0
    metadata: dict[str, str] = msgspec.field(default_factory=dict)

    @property
    def spec(self) -> str:
        """The cron expression, or ``every <seconds> s``."""
        return self.cron if self.cron is not None else f"every {self.every:g} s"

    def next_tick(self, after: float) -> float:
        """The first tick strictly after ``after`` (epoch seconds), in epoch seconds."""
        if self.every is not None:
            step_ms = round(self.every * 1000)
            after_ms = math.floor(after * 1000)
            return (after_ms // step_ms + 1) * step_ms / 1000.0
        assert self.cron is not None
        tz = ZoneInfo(self.timezone)
        start = datetime.fromtimestamp(math.floor(after), tz)
        return next(CronSim(self.cron, start)).timestamp()

    def previous_tick(self, at: float) -> float | None:
        """The last tick at or before ``at`` (epoch seconds), or ``None`` if there is none."""
        if self.every is not None:
            step_ms = round(self.every * 1000)
            return (math.floor(at * 1000) // step_ms) * step_ms / 1000.0
        assert self.cron is not None
        tz = ZoneInfo(self.timezone)
        # one second past ``at`` (with a fraction, so cronsim's reverse walk includes ``at`` itself)
        start = datetime.fromtimestamp(math.floor(at) + 0.5, tz)
        try:
            return next(CronSim(self.cron, start, reverse=True)).timestamp()
        except StopIteration:  # pragma: no cover - cronsim stops only before year 1
            return None


def tick_key(schedule: Schedule, tick: float) -> str:
    """The idempotency key of ``schedule``'s tick at ``tick`` epoch seconds: ``periodic:<name>:<ms>``."""
    return f"periodic:{schedule.name}:{round(tick * 1000)}"


def key_ttl_ms(schedule: Schedule, idempotency_ttl: float) -> int:
    """How long a tick's key is remembered, ms: the engine's ``idempotency_ttl``, at least the catch-up + 1 h.

    A key must outlive every later attempt to enqueue its tick: the live
    enqueues (within clock skew of the tick) and the ``run_once`` catch-up
    at a restart (up to ``catch_up`` seconds later).
    """
    return round(max(idempotency_ttl, schedule.catch_up + 3600.0) * 1000)


def make_schedule(
    every_or_cron: str | float,
    activity_type: str,
    *,
    payload: Any = None,
    name: str | None = None,
    timezone: str | None = None,
    missed: str = "skip",
    catch_up: float = 86400.0,
    priority: Priority | int | None = None,
    metadata: dict[str, str] | None = None,
    max_retries: int | None = None,
    timeout: float | None = None,
) -> Schedule:
    """Validate the arguments of :meth:`WorkerEngine.periodic` into a :class:`Schedule`.

    Raises
    ------
    ConfigError
        On a bad cron expression, interval, timezone, policy or name, or a
        payload that cannot be encoded.
    """
    cron: str | None = None
    every: float | None = None
    if isinstance(every_or_cron, str):
        cron = " ".join(every_or_cron.split())
        try:
            next(CronSim(cron, datetime.now(UTC)))
        except (CronSimError, StopIteration) as exc:
            raise ConfigError(f"bad cron expression {every_or_cron!r}: {exc}") from None
        tz = timezone or "UTC"
        try:
            ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(f"unknown timezone {tz!r} (an IANA name such as 'Europe/Paris')") from None
    elif isinstance(every_or_cron, int | float) and not isinstance(every_or_cron, bool):
        if not math.isfinite(every_or_cron) or every_or_cron < _MIN_INTERVAL:
            raise ConfigError(f"a schedule interval must be at least {_MIN_INTERVAL} s, got {every_or_cron!r}")
        if timezone not in (None, "UTC"):
            raise ConfigError("timezone applies to cron schedules; an interval is counted from the Unix epoch")
        every = float(every_or_cron)
        tz = "UTC"
    else:
        raise ConfigError(f"a schedule is a cron expression (str) or an interval in seconds, got {every_or_cron!r}")
    if missed not in MISSED_POLICIES:
        raise ConfigError(f"missed must be one of {', '.join(MISSED_POLICIES)}, got {missed!r}")
    if isinstance(catch_up, bool) or not isinstance(catch_up, int | float) or not 0 <= catch_up < math.inf:
        raise ConfigError(f"catch_up must be a finite number of seconds >= 0, got {catch_up!r}")
    schedule_name = activity_type if name is None else name
    if not isinstance(schedule_name, str) or not schedule_name.strip() or len(schedule_name) > 200:
        raise ConfigError(f"schedule name must be a non-empty string of at most 200 characters, got {name!r}")
    try:
        check_type_options(max_retries, timeout, priority)
    except InvalidActivityError as exc:
        raise ConfigError(f"schedule {schedule_name!r}: {exc}") from None
    meta = dict(metadata or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise ConfigError("metadata must be a dict of str to str")
    meta["schedule"] = schedule_name
    try:
        encode_payload(payload, 0)
    except InvalidActivityError as exc:
        raise ConfigError(f"schedule {schedule_name!r}: {exc}") from None
    return Schedule(
        name=schedule_name, activity_type=activity_type, cron=cron, every=every, timezone=tz, payload=payload,
        priority=None if priority is None else int(priority), max_retries=max_retries,
        timeout=None if timeout is None else float(timeout), missed=missed, catch_up=float(catch_up), metadata=meta,
    )


async def enqueue_tick(executor: ActivityExecutor, schedule: Schedule, tick: float) -> str:
    """Enqueue ``schedule``'s activity for ``tick`` (epoch seconds); return its id (existing if already enqueued).

    Raises
    ------
    Exception
        Whatever the backend raises; the caller retries.
    """
    builder = (
        executor.activity(schedule.activity_type)
        .payload(schedule.payload)
        .run_at(tick)
        .metadata({**schedule.metadata, "tick": _iso(tick)})
        .idempotency_key(tick_key(schedule, tick), OnDuplicate.RETURN_EXISTING)
    )
    if schedule.priority is not None:
        builder.priority(schedule.priority)
    if schedule.max_retries is not None:
        builder.max_retries(schedule.max_retries)
    if schedule.timeout is not None:
        builder.timeout(schedule.timeout)
    if executor._defaults_stale():
        await executor.type_defaults()  # the type's own defaults, for the options the schedule leaves unset
    item = builder.build()
    item = msgspec.structs.replace(item, idempotency_ttl_ms=key_ttl_ms(schedule, executor.config.idempotency_ttl))
    (res,) = await executor.backend.enqueue(executor.queue_name, [item])
    return res.activity_id


async def _sleep_until(when: float) -> None:
    """Sleep until wall-clock time ``when`` (epoch seconds); timers may fire a little early, so re-check."""
    while True:
        delay = when - time.time()
        if delay <= 0:
            return
        await asyncio.sleep(delay)


async def _enqueue_retrying(executor: ActivityExecutor, schedule: Schedule, tick: float, give_up_at: float) -> None:
    delay = 0.05
    while True:
        try:
            await enqueue_tick(executor, schedule, tick)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if time.time() + delay >= give_up_at:
                log.error("schedule %r: tick %s not enqueued (%s: %s); giving up on it",
                          schedule.name, _iso(tick), type(exc).__name__, exc)
                return
            log.warning("schedule %r: enqueue of tick %s failed (%s: %s); retrying in %.2f s",
                        schedule.name, _iso(tick), type(exc).__name__, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)


def _iso(tick: float) -> str:
    return datetime.fromtimestamp(tick, UTC).isoformat(timespec="milliseconds")


def late_limit(schedule: Schedule, tick: float) -> float:
    """Seconds tick ``tick`` may be late and still be enqueued as usual: its spacing, at least 1 s, at most 60 s."""
    spacing = schedule.next_tick(tick) - tick
    return min(max(LATE_MIN, spacing), LATE_MAX)


async def _run_one_schedule(executor: ActivityExecutor, schedule: Schedule) -> None:
    now = time.time()
    last = now
    if schedule.missed == "run_once":
        prev = schedule.previous_tick(now)
        if prev is not None and now - prev <= schedule.catch_up:
            await _enqueue_retrying(executor, schedule, prev, prev + late_limit(schedule, prev))
            last = prev
    while True:
        tick = schedule.next_tick(last)
        await _sleep_until(tick)
        limit = late_limit(schedule, tick)
        now = time.time()
        if now - tick <= limit:
            await _enqueue_retrying(executor, schedule, tick, tick + limit)
            last = tick
            continue
        # more than its late limit behind (the loop was blocked or the process suspended, or
        # enqueues kept failing): the ticks from this one up to now were missed
        latest = schedule.previous_tick(now)
        log.warning("schedule %r fell behind: ticks from %s to %s missed (policy %s)",
                    schedule.name, _iso(tick), _iso(latest if latest is not None else now), schedule.missed)
        if schedule.missed == "run_once" and latest is not None and now - latest <= schedule.catch_up:
            await _enqueue_retrying(executor, schedule, latest, latest + late_limit(schedule, latest))
        last = now


async def run_schedules(executor: ActivityExecutor, schedules: Sequence[Schedule]) -> None:
    """Run every schedule until cancelled (one task per schedule, each sleeping until its next tick)."""
    tasks = [asyncio.create_task(_run_one_schedule(executor, s), name=f"runnerq-schedule-{s.name}")
             for s in schedules]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
