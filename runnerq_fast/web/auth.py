"""Who may write: the bearer-token check and the read-only switch.

Reads are open. Every mutating route (enqueue, actions) calls
:func:`require_write` first: on a read-only app it answers 405, and when a
token is configured it needs ``Authorization: Bearer <token>``, compared in
constant time (:func:`hmac.compare_digest`).
"""

from __future__ import annotations

import hmac

from starlette.requests import Request

from runnerq_fast.web.responses import ProblemError

__all__ = ["check_write", "require_write"]

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="runnerq"'}


def require_write(request: Request, token: bytes | None, read_only: bool) -> None:
    """Refuse a write the app does not allow.

    Parameters
    ----------
    request : Request
        The incoming request.
    token : bytes or None
        The configured token (UTF-8), or ``None`` for no authentication.
    read_only : bool
        Whether the app serves GETs only.

    Raises
    ------
    ProblemError
        405 on a read-only app; 401 (with ``WWW-Authenticate``) when the token
        is missing, malformed or wrong.
    """
    check_write(request.headers.get("authorization"), token, read_only)


def check_write(header: str | None, token: bytes | None, read_only: bool) -> None:
    """:func:`require_write` given the ``Authorization`` header's value (``None`` if absent)."""
    if read_only:
        raise ProblemError(
            405,
            "this service is read-only (read_only=True / --read-only): it serves GET requests only",
            headers={"Allow": "GET, HEAD"},
        )
    if token is None:
        return
    if header is None:
        raise ProblemError(401, "this route needs 'Authorization: Bearer <token>'", headers=_CHALLENGE)
    scheme, _, presented = header.partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        raise ProblemError(401, "the Authorization header must be 'Bearer <token>'", headers=_CHALLENGE)
    if not hmac.compare_digest(presented.strip().encode(), token):
        raise ProblemError(401, "the bearer token is not valid", headers=_CHALLENGE)
