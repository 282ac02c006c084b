"""What a redis-py exception says about the request that raised it (see :mod:`runnerq_fast.resilience`).

The one place the Redis backend maps its driver's exceptions; the backend's
public calls turn a fault into :class:`~runnerq_fast.errors.BackendError` and
retry it where :class:`~runnerq_fast.resilience.Fault` allows.
"""

from __future__ import annotations

from redis import exceptions as rx

from runnerq_fast.resilience import Fault

__all__ = ["classify"]

# redis-py's messages for a connection that was never made ("Error 111 connecting to host:port.",
# "Timeout connecting to server") or never handed out ("No connection available.")
_NOT_CONNECTED = ("connecting to", "No connection available")


def classify(exc: Exception) -> Fault | None:
    """The :class:`Fault` ``exc`` (raised inside a Redis backend call) means; ``None``: not redis-py's.

    A refused or timed-out connect, a full pool and a server still loading
    its data set refuse before the command is sent, so does a Redis Cluster
    that is down or has no master for the slot yet (a failover in progress); a connection lost or
    timed out afterwards may have run it; a wrong password or any reply
    error (``ResponseError``, a script error, OOM) is an answer.
    """
    if isinstance(exc, rx.AuthenticationError | rx.AuthorizationError):
        return Fault.ANSWERED
    if isinstance(exc, rx.MaxConnectionsError | rx.BusyLoadingError):
        return Fault.UNSENT
    if isinstance(exc, rx.ClusterDownError | rx.TryAgainError | rx.SlotNotCoveredError):
        # Redis Cluster refused the command (a failover in progress, a slot being migrated): not run
        return Fault.UNSENT
    if isinstance(exc, rx.RedisClusterException):
        # redis-py's own cluster errors come before any send: no reachable node is a fault, the rest answers
        return Fault.UNSENT if "cannot be connected" in str(exc) else Fault.ANSWERED
    if isinstance(exc, rx.ConnectionError | rx.TimeoutError):
        text = str(exc)
        return Fault.UNSENT if any(m in text for m in _NOT_CONNECTED) else Fault.UNKNOWN
    if isinstance(exc, rx.RedisError):
        return Fault.ANSWERED
    if isinstance(exc, OSError | TimeoutError):
        return Fault.UNKNOWN
    return None
