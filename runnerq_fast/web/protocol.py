"""uvicorn's httptools protocol with a bound on a request's header section: its size and the time to send it.

uvicorn's httptools parser buffers a header line however long it is (a
100 MiB line grew ``serve`` from 76 to 199 MiB before any route or token
check), and a client that sends its headers a byte at a time holds its
connection for ever: uvicorn's ``timeout_keep_alive`` only runs between
requests. h11 has a size bound (``h11_max_incomplete_event_size``) but no
time bound, and parses at a fraction of httptools' speed.

:func:`bounded_protocol` returns a subclass of uvicorn's
``HttpToolsProtocol`` that counts the bytes received from the start of a
request until its headers are complete and answers ``431 Request Header
Fields Too Large`` (then closes) past ``max_header_bytes``, and answers
``408 Request Timeout`` (then closes) when the headers are not complete
``header_timeout`` seconds after the request's first byte. A new connection
that sends nothing at all is closed, without an answer, ``header_timeout``
seconds after it opened (uvicorn's keep-alive timeout runs only after a
response; without this, 1,100 silent connections were all still open after
130 s). Bodies are not
concerned (the routes bound those). Pass it as ``uvicorn.Config(http=...)``;
``runnerq-fast serve`` does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

__all__ = ["DEFAULT_HEADER_TIMEOUT", "DEFAULT_MAX_HEADER_BYTES", "bounded_protocol"]

DEFAULT_MAX_HEADER_BYTES = 64 * 1024
"""Largest request line plus header section, bytes (nginx's default allows 4 x 8 KiB, Node.js 16 KiB)."""

DEFAULT_HEADER_TIMEOUT = 20.0
"""Longest time from a request's first byte to the end of its headers, seconds."""


class _BoundedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` with a header-section size and time bound (set by :func:`bounded_protocol`)."""

    max_header_bytes = DEFAULT_MAX_HEADER_BYTES
    header_timeout = DEFAULT_HEADER_TIMEOUT

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0  # bytes of the current request's head received so far
        self._in_body = False  # its headers are complete: bytes until its end are body
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # the first request's head is due within header_timeout of the connection opening; between two
        # requests uvicorn's keep-alive timer runs instead, and a response in progress (an SSE stream, a
        # long-poll) has had its head complete, so neither is concerned
        self._head_timer = self.loop.call_later(self.header_timeout, self._head_too_slow)

    def data_received(self, data: bytes) -> None:
        if not self._in_body:
            if self._head_bytes == 0 and self._head_timer is None:
                self._head_timer = self.loop.call_later(self.header_timeout, self._head_too_slow)
            self._head_bytes += len(data)
        super().data_received(data)
        if not self._in_body and self._head_bytes > self.max_header_bytes and not self.transport.is_closing():
            # the parser holds at most one read (256 KiB) beyond the bound
            self._refuse(431, f"the request line and headers exceed {self.max_header_bytes} bytes")

    def on_headers_complete(self) -> None:
        self._in_body = True
        self._cancel_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_body = False
        self._head_bytes = 0

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self._in_body or self.transport.is_closing():
            return
        if self._head_bytes == 0:
            # nothing was sent: close as uvicorn's keep-alive timeout does, no answer a client could take
            # for the response to a request it sends at this instant
            self.transport.close()
        else:
            self._refuse(408, f"the request headers did not arrive within {self.header_timeout:g} seconds")

    def _refuse(self, status: int, msg: str) -> None:
        self.logger.warning("Refused a request: %s.", msg)
        self._cancel_head_timer()
        body = msg.encode("ascii")
        content = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend([
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
            b"connection: close\r\n",
            b"\r\n",
            body,
        ])
        self.transport.write(b"".join(content))
        self.transport.close()


def bounded_protocol(max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
                     header_timeout: float = DEFAULT_HEADER_TIMEOUT) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol class, bounding each request's header section.

    Parameters
    ----------
    max_header_bytes : int
        Largest request line plus headers, bytes; more is answered ``431``
        and the connection closed. Default 64 KiB.
    header_timeout : float
        Seconds from a request's first byte (or, for a connection's first
        request, from the connection opening) to the end of its headers;
        later is answered ``408`` and the connection closed. A new connection
        that sends no byte within it is closed without an answer. Default 20.

    Returns
    -------
    type
        A subclass of ``uvicorn.protocols.http.httptools_impl.HttpToolsProtocol``,
        for ``uvicorn.Config(app, http=...)``.

    Raises
    ------
    ValueError
        If ``max_header_bytes`` is below 1 KiB or ``header_timeout`` is not a
        positive number of seconds.
    """
    if isinstance(max_header_bytes, bool) or not isinstance(max_header_bytes, int) or max_header_bytes < 1024:
        raise ValueError(f"max_header_bytes must be an int of at least 1024, got {max_header_bytes!r}")
    if isinstance(header_timeout, bool) or not isinstance(header_timeout, int | float) or not (
        0 < header_timeout < float("inf")
    ):
        raise ValueError(f"header_timeout must be a positive number of seconds, got {header_timeout!r}")
    return type("BoundedHttpToolsProtocol", (_BoundedHttpToolsProtocol,),
                {"max_header_bytes": max_header_bytes, "header_timeout": float(header_timeout)})
