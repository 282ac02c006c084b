"""What a sqlite3 exception says about the request that raised it (see :mod:`runnerq_fast.resilience`).

The one place the SQLite backend maps its driver's exceptions; the backend's
public calls turn a fault into :class:`~runnerq_fast.errors.BackendError` and
retry it where :class:`~runnerq_fast.resilience.Fault` allows.
"""

from __future__ import annotations

import sqlite3

from runnerq_fast.resilience import Fault

__all__ = ["classify"]

# A write lock held past busy_timeout by another connection, or a file that cannot be opened (yet):
# the statement did not run and its transaction was rolled back, so nothing was applied.
_NOT_APPLIED = ("database is locked", "database table is locked", "busy", "unable to open")


def classify(exc: Exception) -> Fault | None:
    """The :class:`Fault` ``exc`` (raised inside a SQLite backend call) means; ``None``: not sqlite3's.

    A busy or locked database and a file that cannot be opened are
    ``UNSENT`` (SQLite applied nothing); an I/O error is ``UNKNOWN``; any other
    ``sqlite3.Error`` (a corrupt file, a missing table, a full disk) is an answer.
    """
    if not isinstance(exc, sqlite3.Error):
        return None
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and any(m in text for m in _NOT_APPLIED):
        return Fault.UNSENT
    if "disk I/O error" in text:
        return Fault.UNKNOWN
    return Fault.ANSWERED
