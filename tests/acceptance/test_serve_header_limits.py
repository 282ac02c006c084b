"""A real ``serve`` process and a raw socket: a huge header line and a slow one are refused (issue 26, item 2).

Before: uvicorn's httptools parser buffered a 100 MiB header line (the
server grew by about as much, before any route or token check), and a
client sending its headers a byte at a time held its connection for ever.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.acceptance.helpers import run_cli
from tests.acceptance.serve_helpers import ServeProcess

MiB = 1024 * 1024


def peak_rss_bytes(pid: int) -> int:
    """The most resident memory a process has had (Linux ``/proc``, ``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def send_huge_header(port: int, total: int) -> tuple[int, bytes]:
    """Send one header line of ``total`` bytes, 64 KiB at a time, until the server answers or closes.

    Returns (bytes sent, what came back). Within the first MiB it waits a little for an answer after each
    chunk, so that the server's answer is read before more data makes it reset the connection.
    """
    chunk = b"a" * (64 * 1024)
    answer = b""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
        try:
            while sent < total:
                s.sendall(chunk)
                sent += len(chunk)
                if select.select([s], [], [], 0.005 if 64 * 1024 < sent <= MiB else 0)[0]:
                    break
            s.settimeout(5)
            while True:
                data = s.recv(65536)
                if not data:
                    break
                answer += data
        except (ConnectionResetError, BrokenPipeError):
            pass
    return sent, answer


def test_a_100_mib_header_line_is_refused_with_431_and_memory_stays_bounded(
    tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    server = start_serve("--backend", f"sqlite:///{tmp_path / 'web.db'}")
    with httpx.Client(base_url=server.base_url, timeout=10) as c:
        assert c.get("/healthz").status_code == 200
        # a large header within the bound is served as before
        assert c.get("/healthz", headers={"X-Fits": "b" * (32 * 1024)}).status_code == 200
    before = peak_rss_bytes(server.proc.pid)
    sent, answer = send_huge_header(server.port, 100 * MiB)
    grown = peak_rss_bytes(server.proc.pid) - before
    assert sent < 4 * MiB, f"the server read {sent} bytes of one header line"
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"exceed 65536 bytes" in answer and b"connection: close" in answer.lower()
    assert grown < 16 * MiB, f"the server grew by {grown / MiB:.1f} MiB"
    with httpx.Client(base_url=server.base_url, timeout=10) as c:
        assert c.get("/healthz").status_code == 200  # still serving


@pytest.mark.slow
def test_headers_sent_too_slowly_are_answered_408_and_the_connection_closed(
    tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    server = start_serve("--backend", f"sqlite:///{tmp_path / 'web.db'}", "--header-timeout", "1")
    answer = b""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        try:
            for _ in range(50):  # a byte every 0.1 s: never a complete head, for 5 s
                s.sendall(b"X")
                if select.select([s], [], [], 0.1)[0]:
                    answer = s.recv(65536)
                    break
        except (ConnectionResetError, BrokenPipeError):
            pass
    took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"within 1 seconds" in answer
    assert 0.9 < took < 3, took
    # a client that sends its request at once is not concerned, nor an idle keep-alive connection's next request
    with httpx.Client(base_url=server.base_url, timeout=10) as c:
        assert c.get("/healthz").status_code == 200
        time.sleep(1.2)
        assert c.get("/healthz").status_code == 200


def test_bad_header_bounds_are_usage_errors(tmp_path: Path) -> None:
    for args, message in ((["--max-header-bytes", "100"], "--max-header-bytes"),
                          (["--header-timeout", "0"], "--header-timeout"),
                          (["--header-timeout", "nan"], "--header-timeout")):
        res = run_cli("serve", "--backend", f"sqlite:///{tmp_path / 'web.db'}", *args)
        assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr, res.stderr


def is_closed_by_peer(s: socket.socket) -> bool:
    """Whether the server closed ``s``: readable, and the read gives end of file (or a reset)."""
    if not select.select([s], [], [], 0)[0]:
        return False
    try:
        return s.recv(65536, socket.MSG_PEEK) == b""
    except ConnectionResetError:
        return True


def read_response(s: socket.socket) -> bytes:
    """One whole ``Content-Length`` response from ``s`` (head and body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, f"closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += s.recv(65536)
    return head + b"\r\n\r\n" + body


def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(
    tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    """Before, a silent connection was held for ever: the bound started at a request's first byte."""
    timeout = 0.5
    server = start_serve("--backend", f"sqlite:///{tmp_path / 'web.db'}", "--header-timeout", str(timeout))
    addr = ("127.0.0.1", server.port)
    silent = [socket.create_connection(addr, timeout=10) for _ in range(100)]
    opened = time.monotonic()
    late = socket.create_connection(addr, timeout=10)  # sends its whole request within the bound
    stream = socket.create_connection(addr, timeout=10)  # an event stream, held open past the bound
    try:
        stream.sendall(b"GET /api/observability/stream?queue=default HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        time.sleep(timeout / 2)
        late.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert read_response(late).startswith(b"HTTP/1.1 200 ")
        assert not any(is_closed_by_peer(s) for s in silent)  # nothing is closed early
        deadline = opened + timeout + 2
        while not all(is_closed_by_peer(s) for s in silent) and time.monotonic() < deadline:
            time.sleep(0.05)
        took = time.monotonic() - opened
        still_open = sum(not is_closed_by_peer(s) for s in silent)
        assert still_open == 0, f"{still_open} of {len(silent)} silent connections open after {took:.2f} s"
        assert all(s.recv(65536) == b"" for s in silent)  # closed without an answer
        # a connection that already had a request waits on uvicorn's keep-alive timeout (5 s), not this one
        assert not is_closed_by_peer(late)
        late.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert read_response(late).startswith(b"HTTP/1.1 200 ")
        # and the stream is still being served
        assert not is_closed_by_peer(stream)
        assert stream.recv(65536).startswith(b"HTTP/1.1 200 ")
    finally:
        for s in (*silent, late, stream):
            s.close()
    with httpx.Client(base_url=server.base_url, timeout=10) as c:
        assert c.get("/healthz").status_code == 200  # still serving
