"""What an asyncpg exception says about the request that raised it (see :mod:`runnerq_fast.resilience`).

The one place the PostgreSQL backend maps its driver's exceptions; the
backend's public calls turn a fault into :class:`~runnerq_fast.errors.BackendError`
and retry it where :class:`~runnerq_fast.resilience.Fault` allows.
"""

from __future__ import annotations

import asyncpg
from asyncpg import exceptions as pgx

from runnerq_fast.resilience import Fault

__all__ = ["classify"]

_UNSENT = (
    pgx.CannotConnectNowError,  # 57P03: the server is starting up or shutting down
    pgx.TooManyConnectionsError,  # 53300
    pgx.ClientCannotConnectError,  # 08001
    # "cannot switch to state N; another operation is in progress": a pooled connection the server
    # closed (asyncpg#1069), refused before anything is written to it
    asyncpg.InternalClientError,
)
# The server cancelled the statement or rolled its transaction back: nothing was committed (PostgreSQL
# commits with the statement timeout disabled, so a 57014 never follows a commit), the server answers, and
# the same request may pass later or smaller. Checked before _IN_FLIGHT: 57014 is an OperatorInterventionError.
_BUSY = (
    pgx.QueryCanceledError,  # 57014: statement_timeout, or pg_cancel_backend()
    pgx.LockNotAvailableError,  # 55P03: lock_timeout, or NOWAIT
    pgx.TransactionRollbackError,  # 40001 serialization failure, 40P01 deadlock
    pgx.IdleInTransactionSessionTimeoutError,  # 25P03: the session was ended, its transaction rolled back
    pgx.TransactionTimeoutError,  # 25P04 (PostgreSQL 17 transaction_timeout): likewise
)
_IN_FLIGHT = (
    pgx.PostgresConnectionError,  # 08xxx: ConnectionDoesNotExistError ("closed in the middle of operation"), ...
    pgx.OperatorInterventionError,  # 57P01 admin shutdown, 57P02 crash shutdown, 57P05 idle session timeout
    TimeoutError,
)


def classify(exc: Exception) -> Fault | None:
    """The :class:`Fault` ``exc`` (raised inside a PostgreSQL backend call) means; ``None``: not asyncpg's.

    Connection refusals (``OSError``; asyncpg reports a connection lost
    mid-request as ``ConnectionDoesNotExistError``) and the errors in
    ``_UNSENT`` happened before the request reached the server; those in
    ``_BUSY`` (a statement or lock timeout, a serialization failure, a
    deadlock) were cancelled or rolled back by it, so ``BUSY``; a connection
    lost or shut down during a request, or a timeout, may have come after it
    was applied; any other server error (a missing database, bad SQL) is an
    answer.
    """
    if isinstance(exc, asyncpg.ProtocolError):
        return Fault.UNKNOWN
    if isinstance(exc, _UNSENT):
        return Fault.UNSENT
    if isinstance(exc, _BUSY):
        return Fault.BUSY
    if isinstance(exc, _IN_FLIGHT):
        return Fault.UNKNOWN
    if isinstance(exc, OSError):
        return Fault.UNSENT
    if isinstance(exc, asyncpg.InterfaceError):
        # "connection is closed" / "pool is closing" refuse before sending; the rest is misuse (an answer)
        return Fault.UNSENT if "closed" in str(exc) or "closing" in str(exc) else Fault.ANSWERED
    if isinstance(exc, asyncpg.PostgresError):
        return Fault.ANSWERED
    return None
