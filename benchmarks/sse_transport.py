"""Which SSE transport: Starlette's StreamingResponse or sse-starlette's EventSourceResponse?

Serves the same synthetic event source three ways under uvicorn (uvloop +
httptools) in a subprocess and reads ``-n`` events from each with a raw
socket client in this process, reporting events/s and the server's CPU
seconds per 100k events::

    .venv/bin/python benchmarks/sse_transport.py -n 200000 --repeat 3

* ``streaming``: a StreamingResponse yielding one formatted event per chunk;
* ``streaming-batched``: the same, joining every event already buffered into
  one chunk (what :mod:`runnerq_fast.web.stream` does);
* ``sse-starlette``: EventSourceResponse over ``ServerSentEvent`` objects
  (needs ``pip install sse-starlette``; skipped when it is missing).

The source yields control to the loop every 64 events, like a backend page.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import psutil

EVENT = (
    '{"id":%d,"activity_id":"0191d2c5a1b07000a1b2c3d4e5f60718","queue":"default",'
    '"event_type":"completed","at":"2025-01-01T00:00:00.123000+00:00","detail":null}'
)
TRANSPORTS = ("streaming", "streaming-batched", "sse-starlette")


def _serve(kind: str, port: int, n: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    async def source() -> AsyncIterator[tuple[int, str]]:
        for i in range(1, n + 1):
            yield i, EVENT % i
            if i % 64 == 0:
                await asyncio.sleep(0)

    async def one_per_chunk() -> AsyncIterator[bytes]:
        yield b"retry: 2000\n\n"
        async for i, data in source():
            yield f"id: {i}\ndata: {data}\n\n".encode()

    async def batched() -> AsyncIterator[bytes]:
        yield b"retry: 2000\n\n"
        parts: list[str] = []
        async for i, data in source():
            parts.append(f"id: {i}\ndata: {data}\n\n")
            if i % 64 == 0:
                yield "".join(parts).encode()
                parts.clear()
        if parts:
            yield "".join(parts).encode()

    async def endpoint(request: Request) -> Response:
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        if kind == "streaming":
            return StreamingResponse(one_per_chunk(), media_type="text/event-stream", headers=headers)
        if kind == "streaming-batched":
            return StreamingResponse(batched(), media_type="text/event-stream", headers=headers)
        from sse_starlette import EventSourceResponse, ServerSentEvent

        async def events() -> AsyncIterator[ServerSentEvent]:
            async for i, data in source():
                yield ServerSentEvent(data=data, id=str(i), retry=2000 if i == 1 else None)

        return EventSourceResponse(events(), ping=15)

    app = Starlette(routes=[Route("/stream", endpoint)])
    uvicorn.run(app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", log_level="warning",
                access_log=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _read(port: int, n: int) -> float:
    for _ in range(200):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            break
        except OSError:
            await asyncio.sleep(0.05)
    else:
        raise RuntimeError("server did not start")
    writer.write(b"GET /stream HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
    await writer.drain()
    start = time.perf_counter()
    seen = 0
    tail = b""
    while seen < n:
        chunk = await reader.read(1 << 20)
        if not chunk:
            break
        data = tail + chunk
        seen += data.count(b"id: ")  # the tail is shorter than the needle: nothing is counted twice
        tail = data[-3:]
    elapsed = time.perf_counter() - start
    writer.close()
    return elapsed


def _run_one(kind: str, n: int) -> dict[str, float]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, str(port), str(n)])
    try:
        ps = psutil.Process(proc.pid)
        cpu0 = ps.cpu_times()
        elapsed = asyncio.run(_read(port, n))
        cpu1 = ps.cpu_times()
        server_cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    finally:
        proc.terminate()
        proc.wait(10)
    return {"events_per_s": n / elapsed, "server_cpu_s_per_100k": server_cpu / n * 100_000}


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--output-json")
    args = ap.parse_args()
    try:
        import sse_starlette  # noqa: F401

        kinds = list(TRANSPORTS)
    except ImportError:
        kinds = [k for k in TRANSPORTS if k != "sse-starlette"]
        print("sse-starlette is not installed: skipped", file=sys.stderr)
    results: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    for _ in range(args.repeat):
        for kind in kinds:  # interleaved, so a busy moment on the machine hits every transport
            results[kind].append(_run_one(kind, args.n))
    for kind, runs in results.items():
        rates = sorted(r["events_per_s"] for r in runs)
        cpus = sorted(r["server_cpu_s_per_100k"] for r in runs)
        print(f"{kind:18s} events/s {rates[0]:>9.0f} - {rates[-1]:>9.0f}   "
              f"server CPU per 100k events {cpus[0]:.2f} - {cpus[-1]:.2f} s")
    if args.output_json:
        with open(args.output_json, "w") as fh:
            json.dump({"n": args.n, "results": results, "argv": sys.argv}, fh, indent=2)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        _serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
