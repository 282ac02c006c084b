"""Backends, and :func:`connect` which picks one by URL scheme."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from runnerq_fast.errors import ConfigError
from runnerq_fast.storage import Backend
from runnerq_fast.urls import password_hint, redact_url

__all__ = ["SCHEMES", "connect"]

SCHEMES = ("memory", "sqlite", "postgresql", "postgres", "redis", "rediss", "redis+cluster", "rediss+cluster")


async def connect(url: str | None = None, **options: object) -> Backend:
    """Open the backend named by ``url``.

    Parameters
    ----------
    url : str, optional
        ``memory://``, ``sqlite:///relative/file.db`` (``sqlite:////abs/file.db``
        for an absolute path), ``postgresql://user@host:port/db``
        (``postgres://`` too) or ``redis://[:password@]host:port/db``
        (``rediss://`` for TLS) or ``redis+cluster://host:port,host:port,...``
        for a Redis Cluster (``rediss+cluster://`` for TLS). Default: the ``RUNNERQ_BACKEND`` environment
        variable.
    **options
        Passed to the backend's ``open`` (e.g. ``min_size``/``max_size`` of
        the PostgreSQL pool, ``migrate=False``; ``read_only=True`` for SQLite;
        ``result_ttl`` in seconds and ``max_connections`` for Redis).

    Returns
    -------
    Backend
        Opened and, for SQL backends, migrated.

    Raises
    ------
    ConfigError
        If the URL is missing or its scheme is not supported.
    """
    url = url or os.environ.get("RUNNERQ_BACKEND")
    if not url or not isinstance(url, str):
        raise ConfigError("no backend URL given (pass one or set RUNNERQ_BACKEND)")
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:
        raise ConfigError(f"malformed backend URL {redact_url(url)!r}: {exc}{password_hint(url)}") from None
    if scheme == "memory":
        from runnerq_fast.backends.memory import MemoryBackend

        return MemoryBackend(url)
    if scheme == "sqlite":
        from runnerq_fast.backends.sqlite import SqliteBackend

        return await SqliteBackend.open(url, **options)  # type: ignore[arg-type]
    if scheme in ("postgresql", "postgres"):
        from runnerq_fast.backends.postgres import PostgresBackend

        return await PostgresBackend.open(url, **options)  # type: ignore[arg-type]
    if scheme in ("redis", "rediss"):
        from runnerq_fast.backends.redis import RedisBackend

        return await RedisBackend.open(url, **options)  # type: ignore[arg-type]
    if scheme in ("redis+cluster", "rediss+cluster"):
        from runnerq_fast.backends.redis.cluster import RedisClusterBackend

        return await RedisClusterBackend.open(url, **options)  # type: ignore[arg-type]
    raise ConfigError(
        f"unsupported backend URL scheme {scheme!r} in {redact_url(url)!r}; expected one of: "
        "memory://, sqlite:///file.db, postgresql://, redis://, redis+cluster://"
    )
