"""Helpers for the web tests: an httpx client on the ASGI app, and a real uvicorn server in the test's loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any, Literal

import httpx
import uvicorn
from starlette.applications import Starlette

__all__ = ["asgi_client", "free_port", "live_server", "sse_events"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def asgi_client(app: Starlette, **kw: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client that calls ``app`` in process (no socket; the app's lifespan does not run)."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver", **kw) as c:
        yield c


@contextlib.asynccontextmanager
async def live_server(app: Starlette, *, lifespan: Literal["auto", "on", "off"] = "on") -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn (httptools) on a free loopback port in this event loop; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, http="httptools", lifespan=lifespan,
                            log_level="warning", access_log=False, timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    for _ in range(200):
        if server.started:
            break
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    else:
        raise RuntimeError("uvicorn did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def sse_events(lines: AsyncIterator[str], n: int) -> list[dict[str, str]]:
    """Read ``n`` SSE messages (comment lines skipped) as dicts of their fields."""
    out: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    async for line in lines:
        if line == "":
            if cur:
                out.append(cur)
                cur = {}
                if len(out) >= n:
                    return out
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        cur[field] = value[1:] if value.startswith(" ") else value
    return out
