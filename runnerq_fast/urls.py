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

__all__ = ["MASK", "redact_text", "redact_url", "url_secrets"]

MASK = "***"
"""What a credential is replaced by."""

_SECRET_KEYS = ("password", "passwd", "pwd", "sslpassword")
_QUERY_SECRET = re.compile(r"(?i)(^|[?&;])(" + "|".join(_SECRET_KEYS) + r")=([^&;#]*)")


def _split(url: str) -> tuple[str, str, str]:
    """``(scheme://, netloc, rest)`` of ``url`` by plain text rules (no validation, never raises)."""
    head, sep, tail = url.partition("://")
    if not sep:
        return "", "", url
    cut = len(tail)
    for ch in "/?#":
        i = tail.find(ch)
        if i != -1 and i < cut:
            cut = i
    return head + sep, tail[:cut], tail[cut:]


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
        parameter, longest first (so replacing them in turn never leaves a piece).
    """
    found: set[str] = set()
    _, netloc, rest = _split(url)
    userinfo, at, _ = netloc.rpartition("@")
    if at and ":" in userinfo:
        found.add(userinfo.partition(":")[2])
    for m in _QUERY_SECRET.finditer(rest):
        found.add(m.group(3))
    out = {s for s in found if s} | {unquote(s) for s in found if s}
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
