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

__all__ = ["check_token", "check_write", "require_write"]

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="runnerq"'}


def check_token(token: str) -> bytes:
    """The bearer token as the bytes a request must present, or :class:`ValueError` if none could present it.

    An HTTP header value is Latin-1 bytes without control characters
    (RFC 9110, section 5.5): a token holding a character outside Latin-1
    (``"€"``), a control character (``"\\n"``, ``"\\x00"``) or nothing but
    blanks could never be sent, so every write would be refused. Leading and
    trailing blanks are dropped, as they are from the ``Authorization`` header.

    Parameters
    ----------
    token : str
        The configured token.

    Returns
    -------
    bytes
        The stripped token, Latin-1 encoded.

    Raises
    ------
    ValueError
        For a blank token or one no HTTP client can send.
    """
    text = token.strip()
    if not text:
        raise ValueError("the token must not be blank (pass None for no authentication)")
    for i, ch in enumerate(text):
        code = ord(ch)
        if code > 0xFF:
            raise ValueError(
                f"the token holds {ch!r} (U+{code:04X}) at index {i}, outside Latin-1: an HTTP header cannot "
                "carry it, so no request could ever match; use ASCII letters, digits and punctuation"
            )
        if (code < 0x20 and ch != "\t") or code == 0x7F:
            raise ValueError(
                f"the token holds the control character U+{code:04X} at index {i}: an HTTP header cannot carry "
                "it, so no request could ever match; use ASCII letters, digits and punctuation"
            )
    return text.encode("latin-1")


def require_write(request: Request, token: bytes | None, read_only: bool) -> None:
    """Refuse a write the app does not allow.

    Parameters
    ----------
    request : Request
        The incoming request.
    token : bytes or None
        The configured token (:func:`check_token`), or ``None`` for no authentication.
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
    # the header was decoded as Latin-1 (ASGI), so this gives back the bytes the client sent
    if not hmac.compare_digest(presented.strip().encode("latin-1"), token):
        raise ProblemError(401, "the bearer token is not valid", headers=_CHALLENGE)
