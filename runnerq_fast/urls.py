"""Backend URLs made safe to show: the one redaction used wherever a URL is printed or logged.

A backend URL can carry a credential in two places, and the drivers accept
both: the userinfo (``postgresql://user:secret@host/db``,
``redis://:secret@host/0``) and the query string (``?password=secret``, which
asyncpg and redis-py both read; ``sslpassword``, ``passwd`` and ``pwd`` are
masked too). :func:`redact_url` replaces every such value by ``***`` and never
raises, even for a URL that :func:`urllib.parse.urlsplit` refuses;
:func:`redact_text` applies it to a message that may quote the URL or its
secrets (a driver's error text).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["MASK", "password_hint", "redact_text", "redact_url", "url_secrets"]

MASK = "***"
"""What a credential is replaced by."""

_SECRET_KEYS = ("password", "passwd", "pwd", "sslpassword")
_DELIMITERS = re.compile(r"[/?#\[\]]")
_QUERY_SECRET = re.compile(r"(?i)(^|[?&;])(" + "|".join(_SECRET_KEYS) + r")=([^&;#]*)")


def _host_end(tail: str, start: int = 0) -> int:
    """Index in ``tail`` of the first ``/``, ``?`` or ``#`` at or after ``start`` (``len(tail)`` if none)."""
    cut = len(tail)
    for ch in "/?#":
        i = tail.find(ch, start)
        if i != -1 and i < cut:
            cut = i
    return cut


def _split(url: str) -> tuple[str, str, str]:
    """``(scheme://, netloc, rest)`` of ``url`` by plain text rules (no validation, never raises).

    The netloc ends at the first ``/``, ``?`` or ``#``, unless an ``@`` comes
    after that: then a password holds one of them unencoded (drivers refuse
    such a URL, and its error text must not show the password either), and
    the netloc runs to the host after the last ``@``. An ``@`` in a path or
    query of a URL without credentials then masks more than it should, never less.
    """
    head, sep, tail = url.partition("://")
    if not sep:
        return "", "", url
    cut = _host_end(tail)
    if "@" in tail[cut:] and head.lower() != "sqlite":  # a SQLite URL has no credentials, only a path
        cut = _host_end(tail, tail.rfind("@") + 1)
    return head + sep, tail[:cut], tail[cut:]


def password_hint(url: str) -> str:
    """A hint to append to the error about ``url`` when its password seems to hold ``/``, ``?`` or ``#`` unencoded.

    Returns
    -------
    str
        ``""``, or a sentence starting with ``"; "`` that says to
        percent-encode them (a driver splits the URL at the first of them, so
        its own error names a wrong host, port or database).
    """
    if not isinstance(url, str):
        return ""
    head, sep, tail = url.partition("://")
    if not sep or head.lower() == "sqlite" or "@" not in tail[_host_end(tail):]:
        return ""
    return ('; if the password holds "/", "?", "#", "[" or "]", percent-encode them '
            '(%2F, %3F, %23, %5B, %5D)')


def url_secrets(url: str) -> list[str]:
    """The credentials written in ``url``, as written and percent-decoded (empty ones left out).

    Parameters
    ----------
    url : str
        A backend URL, well-formed or not.

    Returns
    -------
    list of str
        Every password found in the userinfo or in a ``password``-like query
        parameter, longest first (so replacing them in turn never leaves a piece);
        for a password holding ``/``, ``?``, ``#``, ``[`` or ``]`` also its pieces
        between them (what a driver that split the URL there may quote).
    """
    found: set[str] = set()
    _, netloc, rest = _split(url)
    userinfo, at, _ = netloc.rpartition("@")
    if at and ":" in userinfo:
        found.add(userinfo.partition(":")[2])
    for m in _QUERY_SECRET.finditer(rest):
        found.add(m.group(3))
    out = {s for s in found if s} | {unquote(s) for s in found if s}
    # a password with an unencoded "/", "?" or "#": a driver that split the URL there quotes a piece of it
    out |= {piece for s in list(out) for piece in _DELIMITERS.split(s) if piece and piece != s}
    return sorted(out, key=len, reverse=True)


def redact_url(url: str) -> str:
    """Return ``url`` with every credential replaced by ``***``.

    Parameters
    ----------
    url : str
        A backend URL, well-formed or not (a URL that does not parse is
        redacted by the same text rules, never re-raised).

    Returns
    -------
    str
        The URL with the userinfo password and any ``password``, ``passwd``,
        ``pwd`` or ``sslpassword`` query value masked; otherwise unchanged.

    Examples
    --------
    >>> redact_url("postgresql://app:s3cret@db/app?password=s3cret&sslmode=require")
    'postgresql://app:***@db/app?password=***&sslmode=require'
    """
    if not isinstance(url, str):
        return repr(url)
    head, netloc, rest = _split(url)
    userinfo, at, hostport = netloc.rpartition("@")
    if at and ":" in userinfo:
        user = userinfo.partition(":")[0]
        netloc = f"{user}:{MASK}@{hostport}"
    rest = _QUERY_SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}={MASK}", rest)
    return head + netloc + rest


def redact_text(text: str, url: str | None) -> str:
    """``text`` with ``url`` shown redacted and every secret of ``url`` masked.

    For messages that quote a URL or a driver's error (which may repeat the
    password; a secret is masked where it stands as a whole token, not
    inside a longer word). ``url=None`` returns ``text`` unchanged.
    """
    if not url:
        return text
    secrets = [re.compile(rf"(?<![A-Za-z0-9]){re.escape(s)}(?![A-Za-z0-9])") for s in url_secrets(url)]
    pieces = text.split(url)
    for i, piece in enumerate(pieces):
        for secret in secrets:
            # whole tokens only: a password "postgres" must not turn "postgresql://" into "***ql://"
            piece = secret.sub(MASK, piece)
        pieces[i] = piece
    return redact_url(url).join(pieces)
