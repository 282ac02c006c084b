"""PostgreSQL backend (asyncpg): see :class:`PostgresBackend`."""

from __future__ import annotations

from runnerq_fast.backends.postgres.backend import (
    RESULTS_CHANNEL,
    WORK_CHANNEL,
    PostgresBackend,
    apply_migrations,
)

__all__ = ["RESULTS_CHANNEL", "WORK_CHANNEL", "PostgresBackend", "apply_migrations"]
