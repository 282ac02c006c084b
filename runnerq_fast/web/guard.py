"""What a browser may do to the service: the ``Host`` check and the cross-site write check.

Both run in :class:`~runnerq_fast.web.app.RunnerQApp` before any route (the
direct enqueue path included), so a new route cannot forget them.

**Host** (DNS rebinding). A page of ``http://evil.example:8080`` whose name
is made to resolve to 127.0.0.1 reads the service as its own origin; what
gives it away is the ``Host`` header, which names ``evil.example``. An app
answers a request when its ``Host`` names:

* a loopback name or address: ``localhost``, ``*.localhost``, 127.0.0.0/8,
  ``[::1]`` (a page can never make a browser send those for its own name);
* the address the client connected to (``scope["server"]``: ``curl
  http://192.0.2.7:8080/``, where no name was resolved);
* a name in ``allowed_hosts`` (``example.com``; ``.example.com`` for it and
  every subdomain; ``*`` for any);

with any port. When ``allowed_hosts`` is not given, an app whose connection
came in on a loopback address answers only the above; any other (a server
bound to ``0.0.0.0``, a mount behind a proxy) answers any ``Host``. A
request without ``Host`` (HTTP/1.0; no browser sends one) is answered.
Anything else is 400.

**Cross-site writes** (CSRF). A page of another origin can send a POST
without asking first (no CORS preflight) when its body is a form or
``text/plain``, or when it has none; the browser then marks it with
``Origin`` and ``Sec-Fetch-Site``. Every request whose method is not GET,
HEAD or OPTIONS is refused:

* 403 when ``Sec-Fetch-Site`` is ``cross-site`` or ``same-site``, or
  ``Origin`` is present and is not the server's own (its host and port are
  not the request's ``Host``), unless the origin is one of ``cors_origins``
  (``*`` there allows every origin);
* 415 when it carries a body (``Content-Length`` above 0, or
  ``Transfer-Encoding``) or a ``Content-Type``, and that type is not
  ``application/json`` (or ``*/*+json``): a browser cannot send those
  cross-origin without a preflight, which CORS answers.

A request with neither ``Origin`` nor ``Sec-Fetch-Site`` (curl, httpx, the
sync client, the CLI) is not a browser's and passes.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from runnerq_fast.web.responses import ProblemError

__all__ = ["HostGuard", "WriteGuard", "check_allowed_hosts", "is_loopback"]

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def is_loopback(host: str) -> bool:
    """Whether ``host`` only reaches this machine: ``localhost``, ``*.localhost``, 127.0.0.0/8 or ``::1``.

    Brackets around an IPv6 address are ignored. Any other name counts as not
    loopback: it may resolve anywhere.
    """
    h = host.strip().strip("[]").lower().rstrip(".")
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def check_allowed_hosts(hosts: Iterable[str]) -> tuple[str, ...]:
    """Normalise ``allowed_hosts`` (lower case, no brackets, no trailing dot).

    Raises
    ------
    ValueError
        For an entry that is not a host name: blank, non-ASCII (give the IDNA
        ``xn--`` form), or holding a port, path or blank (``example.com:8080``,
        ``http://example.com``).
    """
    if isinstance(hosts, str):
        hosts = [hosts]
    out: list[str] = []
    for entry in hosts:
        if not isinstance(entry, str) or not entry.strip():
            raise ValueError(f"allowed_hosts entries must be host names, got {entry!r}")
        name = entry.strip().lower()
        if name.startswith("[") and name.endswith("]"):
            name = name[1:-1]
        name = name.rstrip(".") if name != "." else name
        bad = not name.isascii() or any(c in name for c in "/@ \t?#") or (":" in name and not _is_ip(name))
        if bad or not name or name == ".":
            raise ValueError(
                f"allowed_hosts entry {entry!r} is not a host name: give a name ('example.com'), '.example.com' "
                "for it and its subdomains, an address, or '*'; no scheme, port or path (any port is allowed)"
            )
        out.append(name)
    return tuple(dict.fromkeys(out))


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _host_name(host: str) -> str:
    """The name of a ``Host`` value, lower case, without port, brackets or trailing dot."""
    h = host.strip().lower()
    if h.startswith("["):
        end = h.find("]")
        name = h[1:end] if end > 0 else h
    else:
        name = h.rpartition(":")[0] if h.count(":") == 1 else h
    return name.rstrip(".")


class HostGuard:
    """Which ``Host`` values one app answers (see the module's text).

    Parameters
    ----------
    allowed_hosts : sequence of str or None
        Names allowed besides the loopback ones and the connection's own
        address (:func:`check_allowed_hosts`); ``None``: only those on a
        loopback connection, anything on another.
    """

    __slots__ = ("_any", "_cache", "_exact", "_suffixes", "configured")

    _CACHE_SIZE = 256

    def __init__(self, allowed_hosts: Sequence[str] | None) -> None:
        hosts = () if allowed_hosts is None else check_allowed_hosts(allowed_hosts)
        #: Whether ``allowed_hosts`` was given (even empty): then every connection is checked.
        self.configured = allowed_hosts is not None
        self._any = "*" in hosts
        self._exact = frozenset(h for h in hosts if not h.startswith("."))
        self._suffixes = tuple(h for h in hosts if h.startswith("."))
        # (Host, local address) -> answer: parsing addresses costs ~20 us a request; cleared when full, since
        # the Host values come from clients
        self._cache: dict[tuple[str, str | None], bool] = {}

    def allows(self, host: str | None, server: object) -> bool:
        """Whether a request with this ``Host`` value (``None``: none sent), on a connection to ``server``
        (the ASGI ``scope["server"]``, ``(address, port)`` or ``None``), is answered."""
        if host is None or self._any:
            return True
        local = server[0] if isinstance(server, tuple | list) and server and isinstance(server[0], str) else None
        key = (host, local)
        answer = self._cache.get(key)
        if answer is None:
            answer = self._allows(host, local)
            if len(self._cache) >= self._CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = answer
        return answer

    def _allows(self, host: str, local: str | None) -> bool:
        if not self.configured and (local is None or not is_loopback(local)):
            return True
        name = _host_name(host)
        if name in self._exact or is_loopback(name):
            return True
        if local is not None and name == local.strip("[]").lower():
            return True
        return any(name.endswith(s) or name == s[1:] for s in self._suffixes)

    @staticmethod
    def refusal(host: str) -> ProblemError:
        """The 400 answer to a ``Host`` the app does not answer."""
        shown = host if len(host) <= 100 else host[:100] + "..."
        return ProblemError(
            400,
            f"this server does not answer to the Host {shown!r} (a page whose name resolves here, DNS "
            "rebinding, would send it); allow the name with create_app(allowed_hosts=[...]) or serve "
            "--allowed-host / RUNNERQ_ALLOWED_HOSTS",
        )


class WriteGuard:
    """The cross-site write check of one app (see the module's text).

    Parameters
    ----------
    origins : sequence of str or None
        The origins CORS allows (``create_app(cors_origins=...)``); they may
        write as the app's own origin does. ``*`` allows every origin.
    """

    __slots__ = ("_any", "_origins")

    def __init__(self, origins: Sequence[str] | None) -> None:
        listed = [o.strip().rstrip("/").lower() for o in origins or ()]
        self._any = "*" in listed
        self._origins = frozenset(listed)

    @staticmethod
    def applies(method: str) -> bool:
        """Whether requests of this method are checked (all but GET, HEAD and OPTIONS)."""
        return method not in _SAFE_METHODS

    def check(self, headers: Iterable[tuple[bytes, bytes]]) -> None:
        """Refuse a write a browser may have sent from another site, or with a body that is not JSON.

        Parameters
        ----------
        headers : iterable of (bytes, bytes)
            The ASGI request headers (lower-case names).

        Raises
        ------
        ProblemError
            403 for a cross-site request from an origin not allowed; 415 for a
            body (or ``Content-Type``) that is not JSON.
        """
        host = origin = site = ctype = None
        has_body = False
        for name, value in headers:
            if name == b"host":
                host = value
            elif name == b"origin":
                origin = value
            elif name == b"sec-fetch-site":
                site = value
            elif name == b"content-type":
                ctype = value
            elif name == b"content-length":
                has_body = has_body or value.strip() not in (b"0", b"")
            elif name == b"transfer-encoding":
                has_body = True
        if origin is not None or site is not None:
            self._check_origin(host, origin, site)
        if ctype is not None:
            media = ctype.split(b";", 1)[0].strip().lower()
            if media != b"application/json" and not (media.endswith(b"+json") and b"/" in media):
                shown = media.decode("latin-1")[:100]
                raise ProblemError(415, f"a write takes an application/json body, not {shown!r}",
                                   headers={"Accept-Post": "application/json"})
        elif has_body:
            raise ProblemError(415, "a write with a body needs 'Content-Type: application/json'",
                               headers={"Accept-Post": "application/json"})

    def _check_origin(self, host: bytes | None, origin: bytes | None, site: bytes | None) -> None:
        text = None if origin is None else origin.decode("latin-1").strip().rstrip("/").lower()
        allowed = text is not None and (self._any or text in self._origins)
        if allowed:
            return
        site_text = None if site is None else site.decode("latin-1").strip().lower()
        if site_text in ("cross-site", "same-site"):
            raise ProblemError(
                403,
                f"a {site_text} write is refused (Sec-Fetch-Site: {site_text}, Origin: {text or 'none'}): a page "
                "of another origin cannot write here; allow its origin with cors_origins / --cors-origin",
            )
        if text is None:
            return
        own = host is not None and text.partition("://")[2] == host.decode("latin-1").strip().lower()
        if not own:
            raise ProblemError(
                403,
                f"a write from the origin {text[:100]!r} is refused: it is not this server's own origin; "
                "allow it with cors_origins / --cors-origin",
            )
