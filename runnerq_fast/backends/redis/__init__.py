"""Redis backend: :class:`RedisBackend` (``redis://`` and ``rediss://`` URLs)."""

from __future__ import annotations

from runnerq_fast.backends.redis.backend import DEFAULT_RESULT_TTL, RedisBackend, load_script

__all__ = ["DEFAULT_RESULT_TTL", "RedisBackend", "load_script"]
