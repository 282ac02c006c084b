"""What a sqlite3 exception says about the request that raised it (see :mod:`runnerq_fast.resilience`).

The one place the SQLite backend maps its driver's exceptions; the backend's
public calls turn a fault into :class:`~runnerq_fast.errors.BackendError` and
retry it where :class:`~runnerq_fast.resilience.Fault` allows.
"""

from __future__ import annotations

import sqlite3

from runnerq_fast.resilience import Fault

__all__ = ["classify"]

# A write lock held past busy_timeout by another connection: the statement did not run and its transaction
# was rolled back, so nothing was applied, and the file answers (BUSY, as a PostgreSQL lock timeout).
_LOCKED = ("database is locked", "database table is locked", "busy")
# A file that cannot be opened (yet): nothing was applied.
_NOT_OPENED = ("unable to open",)


def classify(exc: Exception) -> Fault | None:
    """The :class:`Fault` ``exc`` (raised inside a SQLite backend call) means; ``None``: not sqlite3's.

    A busy or locked database is ``BUSY`` and a file that cannot be opened
    ``UNSENT`` (SQLite applied nothing either way); an I/O error is ``UNKNOWN``; any other
    ``sqlite3.Error`` (a corrupt file, a missing table, a full disk) is an answer.
    """
    if not isinstance(exc, sqlite3.Error):
        return None
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError):
        if any(m in text for m in _LOCKED):
            return Fault.BUSY
        if any(m in text for m in _NOT_OPENED):
            return Fault.UNSENT
    if "disk I/O error" in text:
        return Fault.UNKNOWN
    return Fault.ANSWERED
