"""Redis backend: :class:`RedisBackend` (``redis://`` and ``rediss://`` URLs)."""

from __future__ import annotations

from runnerq_fast.backends.redis.backend import DEFAULT_RESULT_TTL, RedisBackend, event_id, load_script, stream_id

__all__ = ["DEFAULT_RESULT_TTL", "RedisBackend", "event_id", "load_script", "stream_id"]
