"""The one source of truth for engine and executor defaults."""

from __future__ import annotations

import math
from typing import TypedDict

import msgspec

from runnerq_fast.errors import ConfigError

__all__ = [
    "MAX_ACTIVITY_TYPE_LENGTH",
    "MAX_DELAY_SECONDS",
    "MAX_INTERVAL_SECONDS",
    "MAX_PAYLOAD_BYTES",
    "MAX_TIMEOUT_SECONDS",
    "WorkerConfig",
    "WorkerSettings",
    "check_name",
    "check_queue_name",
]

MAX_ACTIVITY_TYPE_LENGTH = 255
"""Longest accepted activity type or queue name, in characters."""

MAX_DELAY_SECONDS = 100 * 365.25 * 86400.0
"""Longest accepted delay, backoff or idempotency TTL (100 years): far enough for any schedule, small enough
for every store (PostgreSQL timestamps and intervals, SQLite integers, the Redis ready-set score)."""

MAX_TIMEOUT_SECONDS = 365.25 * 86400.0
"""Longest accepted handler timeout, lease or shutdown grace (one year)."""

MAX_INTERVAL_SECONDS = 86400.0
"""Longest accepted period of an engine loop (poll, reaper, ack flush, heartbeat): one day."""

MAX_PAYLOAD_BYTES = 64 * 1024 * 1024
"""Largest accepted ``max_payload_bytes`` (64 MiB; every backend stores that much in one value)."""

# field: (lowest, highest); every value an int
_INT_RANGES: dict[str, tuple[int, int]] = {
    "max_workers": (1, 100_000),
    "reaper_batch_size": (1, 100_000),
    "claim_batch_size": (1, 100_000),
    "ack_batch_size": (1, 100_000),
    "default_max_retries": (0, 1_000_000),
    "max_payload_bytes": (1, MAX_PAYLOAD_BYTES),
    "sync_workers": (0, 10_000),
    "prune_batch_size": (1, 100_000),
}

# field: (lowest, highest, whether the lowest is excluded); every value finite float seconds
_SECONDS_RANGES: dict[str, tuple[float, float, bool]] = {
    "lease_timeout": (0.0, MAX_TIMEOUT_SECONDS, True),
    "heartbeat_interval": (0.0, MAX_INTERVAL_SECONDS, False),
    "reaper_interval": (0.0, MAX_INTERVAL_SECONDS, True),
    "shutdown_grace": (0.0, MAX_TIMEOUT_SECONDS, False),
    "ack_flush_interval": (0.0, MAX_INTERVAL_SECONDS, True),
    "poll_interval": (0.0, MAX_INTERVAL_SECONDS, True),
    "default_timeout": (0.0, MAX_TIMEOUT_SECONDS, False),
    "retry_delay": (0.0, MAX_DELAY_SECONDS, False),
    "max_retry_delay": (0.0, MAX_DELAY_SECONDS, False),
    "idempotency_ttl": (0.0, MAX_DELAY_SECONDS, False),
    "prune_interval": (0.0, MAX_INTERVAL_SECONDS, False),
}

# retention fields: None (keep forever) or finite seconds in (0, 100 years]
_RETENTIONS = ("completed_retention", "failed_retention", "event_retention")


def check_name(value: object, what: str) -> str:
    """Return ``value`` if it is a usable queue name or activity type, else raise :class:`ConfigError`.

    Usable: a string of 1-255 characters, not blank, without NUL, that encodes
    to UTF-8 (no lone surrogate such as ``"\\udcff"``: no store could hold it).
    """
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > MAX_ACTIVITY_TYPE_LENGTH:
        raise ConfigError(f"{what} is {len(value)} characters, over the limit of {MAX_ACTIVITY_TYPE_LENGTH}")
    if "\x00" in value:
        raise ConfigError(f"{what} must not contain NUL")
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError as exc:
            raise ConfigError(f"{what} holds text that cannot be encoded as UTF-8 ({exc.reason} at "
                              f"index {exc.start}): {value!r}") from None
    return value


DOT_SEGMENTS = frozenset({".", ".."})
"""Queue names refused everywhere: a URL path cannot name them (``/queues/../x`` is ``/x`` to every
client and proxy, RFC 3986 section 5.2.4), so the HTTP routes and their ``Location`` could not reach them."""


def dot_segment_message(what: str, value: str) -> str:
    """The error text for a queue name in :data:`DOT_SEGMENTS` (shared by :func:`check_queue_name` and the executor)."""
    return (f"{what} must not be '.' or '..', got {value!r}: a URL path cannot name it (clients and proxies "
            "remove dot segments), so its HTTP routes would be unreachable")


def check_queue_name(value: object, what: str) -> str:
    """:func:`check_name` for a queue name, which also refuses ``.`` and ``..`` (:data:`DOT_SEGMENTS`).

    Raises
    ------
    ConfigError
        For every name :func:`check_name` refuses, and for ``.`` and ``..``.
    """
    name = check_name(value, what)
    if name in DOT_SEGMENTS:
        raise ConfigError(dot_segment_message(what, name))
    return name


class WorkerConfig(msgspec.Struct, kw_only=True, frozen=True):
    """Settings of a :class:`~runnerq_fast.WorkerEngine` and its executor.

    Every duration is in **seconds** (floats, so milliseconds are ``0.001``).

    Attributes
    ----------
    queue_name : str
        Queue the engine serves and the executor enqueues to: 1-255
        characters, no NUL, valid Unicode (no lone surrogate). Default ``"default"``.
    max_workers : int
        Activities run at once (worker tasks), 1-100,000. Default 256.
    activity_types : list of str, "*" or None
        Types this engine claims. ``None`` (default): the types it has
        handlers for. ``"*"``: any type; one without a handler fails as
        ``handler_not_found``. A listed type without a handler is a
        :class:`ConfigError` at start; each name follows the rules of ``queue_name``.
    lease_timeout : float
        Lease a claim holds before the reaper may take it back, in (0 s, 1 year].
        Default 30 s. Below 1 s the engine logs a warning at start: a stall of
        the loop or the store longer than the lease has the activity run again
        elsewhere while it still runs here.
    heartbeat_interval : float
        Period of the batched lease extension, in [0 s, 1 day] and shorter
        than ``lease_timeout``. Default 0, meaning ``lease_timeout / 3``.
    reaper_interval : float
        Period of the expired-lease reaper, in (0 s, 1 day]. Default 5 s.
    reaper_batch_size : int
        Most activities one reaper pass takes back, 1-100,000. Default 500.
    shutdown_grace : float
        Time in-flight activities get to finish on stop before they are
        cancelled and released, in [0 s, 1 year]. Default 30 s.
    claim_batch_size : int
        Most activities one claim round trip takes, 1-100,000. Default 500.
    ack_batch_size : int
        Acks that trigger an immediate flush, 1-100,000. Default 500.
    ack_flush_interval : float
        Longest an ack waits in the buffer, in (0 s, 1 day]. Default 0.002 s (2 ms).
    poll_interval : float
        Longest an idle fetcher waits for a wakeup before trying to claim
        anyway (covers lost notifications and due scheduled work), in (0 s, 1 day].
        Default 1 s.
    default_timeout : float
        Handler timeout when the activity sets none, in [0 s, 1 year]; 0 means
        none. Default 300 s.
    default_max_retries : int
        Retries after the first attempt when the activity sets none,
        0-1,000,000. Default 3.
    retry_delay : float
        Base of the exponential backoff, in [0 s, 100 years]. Default 1 s.
    max_retry_delay : float
        Cap of the backoff, in [0 s, 100 years]. Default 3600 s.
    retry_jitter : float
        Fraction in [0, 1] of random reduction applied to each backoff. Default 0.
    max_payload_bytes : int
        Largest encoded payload (and metadata) accepted at enqueue, bytes,
        1 to 64 MiB. Default 1 MiB.
    idempotency_ttl : float
        How long an idempotency key is remembered, in [0 s, 100 years].
        Default 86400 s (24 h).
    sync_workers : int
        Threads for plain ``def`` handlers, 0-10,000; 0 (default) means
        ``min(32, max_workers)``.
    limits : dict of str to int, or None
        Most activities of a type this engine runs at once, e.g.
        ``{"thumbnail": 4}``; the other types share the remaining worker
        slots. Each type must have a handler in the engine (not with
        ``activity_types="*"``); a limit on a type the engine does not claim
        (``activity_types`` narrowed to others) limits nothing there; each
        limit >= 1. Default ``None``: no per-type limit. A limit holds per
        engine; for a limit across all processes run a dedicated engine
        (``--activity-types thumbnail --concurrency 4``) and narrow the
        others to the other types.

    completed_retention : float or None
        Age (since it finished) at which the engine's pruner deletes a
        completed or cancelled activity with its events and idempotency key,
        in (0 s, 100 years]; ``None`` keeps them. Default 86400 s (24 h).
    failed_retention : float or None
        The same for failed and dead-lettered activities. Default 604800 s (7 days).
    event_retention : float or None
        Age at which the pruner deletes events even of activities still
        stored (e.g. the heartbeats of a long job); ``None`` keeps them as
        long as their activity. Default 604800 s (7 days). Redis keeps an
        activity's events in its hash (capped at 1,000) and ignores it.
    prune_interval : float
        Period of the engine's pruner, in [0 s, 1 day]; 0 turns it off.
        Whatever the number of workers, one pruner per queue runs at a time
        (it takes the store's ``"prune"`` hold of the queue for three
        periods and renews it). Default 60 s.
    prune_batch_size : int
        Activities one prune transaction deletes, 1-100,000. Default 1,000.

    Raises
    ------
    ConfigError
        On construction (and on every ``msgspec.structs.replace``), if a value
        is not finite, of the wrong type or outside its range; a seconds
        field takes an int or a float, never a bool.
    """

    queue_name: str = "default"
    max_workers: int = 256
    activity_types: list[str] | str | None = None
    lease_timeout: float = 30.0
    heartbeat_interval: float = 0.0
    reaper_interval: float = 5.0
    reaper_batch_size: int = 500
    shutdown_grace: float = 30.0
    claim_batch_size: int = 500
    ack_batch_size: int = 500
    ack_flush_interval: float = 0.002
    poll_interval: float = 1.0
    default_timeout: float = 300.0
    default_max_retries: int = 3
    retry_delay: float = 1.0
    max_retry_delay: float = 3600.0
    retry_jitter: float = 0.0
    max_payload_bytes: int = 1024 * 1024
    idempotency_ttl: float = 86400.0
    sync_workers: int = 0
    limits: dict[str, int] | None = None
    completed_retention: float | None = 86400.0
    failed_retention: float | None = 7 * 86400.0
    event_retention: float | None = 7 * 86400.0
    prune_interval: float = 60.0
    prune_batch_size: int = 1000

    def __post_init__(self) -> None:
        check_queue_name(self.queue_name, "queue_name")
        for name, (low, high) in _INT_RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be an int, got {value!r}")
            if not low <= value <= high:
                raise ConfigError(f"{name} must be within [{low}, {high}], got {value!r}")
        for name, (lowest, highest, low_open) in _SECONDS_RANGES.items():
            seconds = getattr(self, name)
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
                raise ConfigError(f"{name} must be a finite number of seconds, got {seconds!r}")
            if (seconds <= lowest if low_open else seconds < lowest) or seconds > highest:
                bracket = "(" if low_open else "["
                raise ConfigError(f"{name} must be within {bracket}{lowest:g}, {highest:.0f}] seconds, got {seconds!r}")
        for name in _RETENTIONS:
            kept = getattr(self, name)
            if kept is None:
                continue
            if isinstance(kept, bool) or not isinstance(kept, int | float) or not math.isfinite(kept) \
                    or not 0 < kept <= MAX_DELAY_SECONDS:
                raise ConfigError(f"{name} must be None (keep forever) or a number of seconds within "
                                  f"(0, {MAX_DELAY_SECONDS:.0f}], got {kept!r}")
        jitter = self.retry_jitter
        if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not 0.0 <= jitter <= 1.0:
            raise ConfigError(f"retry_jitter must be within [0, 1], got {jitter!r}")
        if self.heartbeat_interval and self.heartbeat_interval >= self.lease_timeout:
            raise ConfigError("heartbeat_interval must be shorter than lease_timeout")
        types = self.activity_types
        if isinstance(types, str):
            if types != "*":
                raise ConfigError('activity_types must be a list of names, "*" or None')
        elif types is not None:
            if not isinstance(types, list):
                raise ConfigError(f'activity_types must be a list of names, "*" or None, got {type(types).__name__}')
            for t in types:
                check_name(t, "an activity type in activity_types")
        if self.limits is not None and not isinstance(self.limits, dict):
            raise ConfigError(f"limits must be a dict of activity type to int, got {type(self.limits).__name__}")
        for name, limit in (self.limits or {}).items():
            check_name(name, "an activity type in limits")
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ConfigError(f"limits[{name!r}] must be an int >= 1, got {limit!r}")

    @property
    def effective_heartbeat_interval(self) -> float:
        """Heartbeat period in seconds (``lease_timeout / 3`` when unset)."""
        return self.heartbeat_interval or self.lease_timeout / 3.0

    @property
    def effective_sync_workers(self) -> int:
        """Threads for plain ``def`` handlers."""
        return self.sync_workers or min(32, self.max_workers)


class WorkerSettings(TypedDict, total=False):
    """The keyword arguments of ``WorkerEngine(...)`` and ``engine.configure(...)``: any :class:`WorkerConfig` field.

    Only the names and types, so a type checker rejects a misspelt or
    mistyped setting (``WorkerEngine(queue_nme="app")``); the defaults and the
    range checks stay in :class:`WorkerConfig`. A test keeps both lists equal.
    """

    queue_name: str
    max_workers: int
    activity_types: list[str] | str | None
    lease_timeout: float
    heartbeat_interval: float
    reaper_interval: float
    reaper_batch_size: int
    shutdown_grace: float
    claim_batch_size: int
    ack_batch_size: int
    ack_flush_interval: float
    poll_interval: float
    default_timeout: float
    default_max_retries: int
    retry_delay: float
    max_retry_delay: float
    retry_jitter: float
    max_payload_bytes: int
    idempotency_ttl: float
    sync_workers: int
    limits: dict[str, int] | None
    completed_retention: float | None
    failed_retention: float | None
    event_retention: float | None
    prune_interval: float
    prune_batch_size: int
