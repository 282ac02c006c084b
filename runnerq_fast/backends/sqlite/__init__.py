"""SQLite backend (stdlib ``sqlite3``, one file, WAL mode): see :class:`SqliteBackend`."""

from __future__ import annotations

from runnerq_fast.backends.sqlite.backend import SqliteBackend, apply_migrations, sqlite_path

__all__ = ["SqliteBackend", "apply_migrations", "sqlite_path"]
