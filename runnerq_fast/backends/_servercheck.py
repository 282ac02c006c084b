"""Server settings a worker is warned about once per server and process (``Backend.check_server``).

PostgreSQL's autovacuum and Redis's ``maxmemory-policy`` are settings of the
server, not of a database or a queue: a process running several engines on
one server warns once. :func:`first_check` says whether this process has not
checked the server ``url`` names yet (and records that it now has).
"""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["first_check", "server_key"]

_CHECKED: set[str] = set()
"""The servers (:func:`server_key`) checked in this process."""


def server_key(url: str) -> str:
    """The scheme and ``host:port`` (list) of ``url``: the server or cluster it names, not its database or password."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2].lower()}"


def first_check(url: str) -> bool:
    """Whether the server ``url`` names is checked for the first time in this process; it counts as checked after."""
    key = server_key(url)
    if key in _CHECKED:
        return False
    _CHECKED.add(key)
    return True
