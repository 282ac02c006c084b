"""The one source of truth for engine and executor defaults."""

from __future__ import annotations

import msgspec

from runnerq_fast.errors import ConfigError

__all__ = ["MAX_ACTIVITY_TYPE_LENGTH", "WorkerConfig"]

MAX_ACTIVITY_TYPE_LENGTH = 255
"""Longest accepted activity type, in characters."""


class WorkerConfig(msgspec.Struct, kw_only=True, frozen=True):
    """Settings of a :class:`~runnerq_fast.WorkerEngine` and its executor.

    Every duration is in **seconds** (floats, so milliseconds are ``0.001``).

    Attributes
    ----------
    queue_name : str
        Queue the engine serves and the executor enqueues to. Default ``"default"``.
    max_workers : int
        Activities run at once (worker tasks). Default 256.
    activity_types : list of str, "*" or None
        Types this engine claims. ``None`` (default): the types it has
        handlers for. ``"*"``: any type; one without a handler fails as
        ``handler_not_found``. A listed type without a handler is a
        :class:`ConfigError` at start.
    lease_timeout : float
        Lease a claim holds before the reaper may take it back. Default 30 s.
    heartbeat_interval : float
        Period of the batched lease extension. Default 0, meaning
        ``lease_timeout / 3``.
    reaper_interval : float
        Period of the expired-lease reaper. Default 5 s.
    reaper_batch_size : int
        Most activities one reaper pass takes back. Default 500.
    shutdown_grace : float
        Time in-flight activities get to finish on stop before they are
        cancelled and released. Default 30 s.
    claim_batch_size : int
        Most activities one claim round trip takes. Default 500.
    ack_batch_size : int
        Acks that trigger an immediate flush. Default 500.
    ack_flush_interval : float
        Longest an ack waits in the buffer. Default 0.002 s (2 ms).
    poll_interval : float
        Longest an idle fetcher waits for a wakeup before trying to claim
        anyway (covers lost notifications and due scheduled work). Default 1 s.
    default_timeout : float
        Handler timeout when the activity sets none; 0 means none. Default 300 s.
    default_max_retries : int
        Retries after the first attempt when the activity sets none. Default 3.
    retry_delay : float
        Base of the exponential backoff. Default 1 s.
    max_retry_delay : float
        Cap of the backoff. Default 3600 s.
    retry_jitter : float
        Fraction in [0, 1] of random reduction applied to each backoff. Default 0.
    max_payload_bytes : int
        Largest encoded payload accepted at enqueue, bytes. Default 1 MiB.
    idempotency_ttl : float
        How long an idempotency key is remembered. Default 86400 s (24 h).
    sync_workers : int
        Threads for plain ``def`` handlers; 0 (default) means
        ``min(32, max_workers)``.
    limits : dict of str to int, or None
        Most activities of a type this engine runs at once, e.g.
        ``{"thumbnail": 4}``; the other types share the remaining worker
        slots. Each type must be one the engine claims (not with
        ``activity_types="*"``); each limit >= 1. Default ``None``: no
        per-type limit. A limit holds per engine; for a limit across all
        processes run a dedicated engine (``--activity-types thumbnail
        --concurrency 4``).

    Raises
    ------
    ConfigError
        On construction, if a value is out of range.
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

    def __post_init__(self) -> None:
        if not self.queue_name or len(self.queue_name) > MAX_ACTIVITY_TYPE_LENGTH:
            raise ConfigError("queue_name must be 1-255 characters")
        if "\x00" in self.queue_name:
            raise ConfigError("queue_name must not contain NUL")
        for name in ("max_workers", "reaper_batch_size", "claim_batch_size", "ack_batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        for name in ("lease_timeout", "reaper_interval", "ack_flush_interval", "poll_interval"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")
        for name in (
            "heartbeat_interval",
            "shutdown_grace",
            "default_timeout",
            "retry_delay",
            "max_retry_delay",
            "idempotency_ttl",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0 seconds, got {getattr(self, name)!r}")
        if self.default_max_retries < 0 or self.max_payload_bytes < 1 or self.sync_workers < 0:
            raise ConfigError("default_max_retries, sync_workers must be >= 0 and max_payload_bytes >= 1")
        if not 0.0 <= self.retry_jitter <= 1.0:
            raise ConfigError("retry_jitter must be within [0, 1]")
        if self.heartbeat_interval and self.heartbeat_interval >= self.lease_timeout:
            raise ConfigError("heartbeat_interval must be shorter than lease_timeout")
        if isinstance(self.activity_types, str) and self.activity_types != "*":
            raise ConfigError('activity_types must be a list of names, "*" or None')
        for name, limit in (self.limits or {}).items():
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
