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
