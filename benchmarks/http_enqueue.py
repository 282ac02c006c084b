"""HTTP enqueue throughput: ``runnerq-fast serve`` in a subprocess, driven by 64 keep-alive clients.

::

    .venv/bin/python benchmarks/http_enqueue.py sqlite:////tmp/rqhttp.db redis://127.0.0.1:6379/0 \\
        postgresql://postgres@127.0.0.1:5432/rqhttp --duration 10 --output-json http.json

For each backend URL: start ``runnerq-fast serve`` on a free loopback port
(a fresh ``httpbench-<random>`` queue), then

* ``single``: ``--connections`` (64) keep-alive connections each sending one
  ``POST /api/v1/queues/Q/activities`` after the other for ``--duration``
  seconds — requests/s, latency p50/p90/p99;
* ``batch``: ``--batch-connections`` (4) connections sending
  ``POST .../activities/batch`` of ``--batch-size`` (1000) activities —
  activities/s and request latency.

The client is ``wrk`` (C, one thread) when it is on PATH (Debian: ``apt-get
install wrk``), else a Python asyncio client in a subprocess (which needs more
CPU than the server for the single test: read its figures as a lower bound).
Server and client CPU seconds are measured from ``/proc`` (psutil) over the
run and reported per request, so a figure from a busy machine can be read
correctly. Each run reports how many activities the store holds for its queue next to
how many the server acknowledged (201); on Redis the queue's keys are then
deleted (a shared server), SQL rows are left in place.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
BODY = b'{"type":"noop","payload":{"order":12345,"note":"benchmark"}}'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("runnerq-fast")
    return [str(script)] if script.exists() else [sys.executable, "-m", "runnerq_fast.cli"]


def _redact(url: str) -> str:
    return re.sub(r"//([^:/@]+):([^@/]+)@", r"//\1:***@", url)


class Server:
    """``runnerq-fast serve`` on a free port; ``cpu()`` is its user+system CPU seconds so far."""

    def __init__(self, url: str, extra: list[str]) -> None:
        self.port = _free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="rq-serve-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*_cli(), "serve", "--backend", url, "--port", str(self.port), "--log-level", "warning", *extra],
            stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.ps = psutil.Process(self.proc.pid)
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"serve did not start: {Path(self.log.name).read_text()}") from None
                time.sleep(0.05)

    def cpu(self) -> float:
        t = self.ps.cpu_times()
        return float(t.user + t.system)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        os.unlink(self.log.name)


# ----------------------------------------------------------------- clients
def _wrk(url: str, body: bytes, connections: int, duration: float) -> tuple[dict[str, Any], float]:
    """Run wrk; return its figures and its CPU seconds."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:
        lua.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n')
        lua.write(f"wrk.body = {json.dumps(body.decode())}\n")
        lua.write(
            "done = function(summary, latency, requests)\n"
            '  io.write(string.format("JSON {\\"requests\\": %d, \\"non2xx\\": %d, \\"errors\\": %d, '
            '\\"p50\\": %f, \\"p90\\": %f, \\"p99\\": %f, \\"max\\": %f, \\"duration_us\\": %d}\\n", '
            "summary.requests, summary.errors.status, summary.errors.connect + summary.errors.read + "
            "summary.errors.write + summary.errors.timeout, latency:percentile(50), latency:percentile(90), "
            "latency:percentile(99), latency.max, summary.duration))\n"
            "end\n"
        )
    try:
        proc = subprocess.Popen(
            ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s", "--timeout", "10s",
             "-s", lua.name, url],
            stdout=subprocess.PIPE, text=True,
        )
        ps = psutil.Process(proc.pid)
        cpu = 0.0
        while proc.poll() is None:
            try:
                t = ps.cpu_times()
                cpu = t.user + t.system
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        out = proc.stdout.read() if proc.stdout else ""
    finally:
        os.unlink(lua.name)
    line = next(x for x in out.splitlines() if x.startswith("JSON "))
    raw = json.loads(line[5:])
    secs = raw["duration_us"] / 1e6
    return {
        "requests": raw["requests"],
        "failed": raw["non2xx"] + raw["errors"],
        "seconds": secs,
        "p50_ms": raw["p50"] / 1000, "p90_ms": raw["p90"] / 1000, "p99_ms": raw["p99"] / 1000,
        "max_ms": raw["max"] / 1000,
    }, cpu


async def _py_clients(host: str, port: int, path: str, body: bytes, connections: int,
                      duration: float) -> dict[str, Any]:
    request = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    lat: list[float] = []
    failed = 0
    stop_at = time.perf_counter() + duration

    async def one() -> None:
        nonlocal failed
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                m = re.search(rb"(?i)content-length: *(\d+)", head)
                await reader.readexactly(int(m.group(1)) if m else 0)
                lat.append(time.perf_counter() - t0)
                if status >= 300:
                    failed += 1
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(connections)))
    secs = time.perf_counter() - t0
    lat.sort()

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(p / 100 * len(lat)))] * 1000 if lat else 0.0

    return {"requests": len(lat), "failed": failed, "seconds": secs, "p50_ms": pct(50), "p90_ms": pct(90),
            "p99_ms": pct(99), "max_ms": lat[-1] * 1000 if lat else 0.0}


def _python_client(
    port: int, path: str, body: bytes, connections: int, duration: float
) -> tuple[dict[str, Any], float]:
    """The asyncio client in a subprocess (so its CPU is measured apart from this script)."""
    code = (
        f"import asyncio, json, sys; sys.path.insert(0, {str(HERE)!r}); import http_enqueue as h; "
        f"print(json.dumps(asyncio.run(h._py_clients('127.0.0.1', {port}, {path!r}, {body!r}, {connections}, "
        f"{duration}))))"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    ps = psutil.Process(proc.pid)
    cpu = 0.0
    while proc.poll() is None:
        try:
            t = ps.cpu_times()
            cpu = t.user + t.system
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    out = proc.stdout.read() if proc.stdout else ""
    return json.loads(out.strip().splitlines()[-1]), cpu


def drive(port: int, path: str, body: bytes, connections: int, duration: float, client: str) -> dict[str, Any]:
    """One load run; the figures plus the client's CPU seconds."""
    if client == "wrk":
        figures, cpu = _wrk(f"http://127.0.0.1:{port}{path}", body, connections, duration)
    else:
        figures, cpu = _python_client(port, path, body, connections, duration)
    figures["client_cpu_s"] = cpu
    return figures


async def _stored(url: str, queue: str) -> int:
    """What the store holds for ``queue``; on Redis (a shared server) the queue's keys are then deleted."""
    import runnerq_fast as rq

    backend = await rq.connect(url)
    try:
        n = (await backend.stats(queue)).total
    finally:
        await backend.close()
    if url.startswith(("redis:", "rediss:")):
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(url)
        try:
            chunk: list[bytes] = []
            async for key in client.scan_iter(match=f"rq:{{{queue}}}:*", count=5000):
                chunk.append(key)
                if len(chunk) >= 1000:
                    await client.unlink(*chunk)
                    chunk.clear()
            if chunk:
                await client.unlink(*chunk)
        finally:
            await client.aclose()
    return n


def run_backend(url: str, args: argparse.Namespace, client: str) -> dict[str, Any]:
    """Both tests on one backend."""
    queue = f"httpbench-{uuid.uuid4().hex[:8]}"
    path = f"/api/v1/queues/{queue}/activities"
    server = Server(url, args.serve_arg)
    result: dict[str, Any] = {"backend": _redact(url), "queue": queue}
    try:
        warm = drive(server.port, path, BODY, args.connections, min(2.0, args.duration), client)
        runs: dict[str, Any] = {}
        for name, p, body, conns, per_request in (
            ("single", path, BODY, args.connections, 1),
            ("batch", path + "/batch", _batch_body(args.batch_size), args.batch_connections, args.batch_size),
        ):
            cpu0 = server.cpu()
            fig = drive(server.port, p, body, conns, args.duration, client)
            cpu = server.cpu() - cpu0
            ok = fig["requests"] - fig["failed"]
            fig.update({
                "connections": conns,
                "requests_per_s": fig["requests"] / fig["seconds"],
                "activities_per_s": ok * per_request / fig["seconds"],
                "server_cpu_s": cpu,
                "server_cpu_ms_per_request": cpu / max(1, fig["requests"]) * 1000,
                "server_cpu_us_per_activity": cpu / max(1, ok * per_request) * 1e6,
                "client_cpu_ms_per_request": fig["client_cpu_s"] / max(1, fig["requests"]) * 1000,
            })
            runs[name] = fig
        result.update(runs)
    finally:
        server.stop()
    # what wrk counts is what was answered; requests cut off at the end may be stored unanswered
    acknowledged = warm["requests"] - warm["failed"]
    # memory:// lives in the server process: nothing to count from here
    stored = None if url.startswith("memory:") else asyncio.run(_stored(url, queue))
    result["stored"] = stored
    result["acknowledged"] = acknowledged + sum(
        (r["requests"] - r["failed"]) * (args.batch_size if k == "batch" else 1) for k, r in runs.items()
    )
    return result


def _batch_body(n: int) -> bytes:
    item = '{"type":"noop","payload":{"order":12345,"note":"benchmark"}}'
    return ('{"activities":[' + ",".join([item] * n) + "]}").encode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("urls", nargs="+", help="backend URLs")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per test (default 10)")
    ap.add_argument("--connections", type=int, default=64, help="keep-alive clients of the single test (64)")
    ap.add_argument("--batch-connections", type=int, default=4, help="clients of the batch test (4)")
    ap.add_argument("--batch-size", type=int, default=1000, help="activities per batch request (1000)")
    ap.add_argument("--client", choices=["auto", "wrk", "python"], default="auto")
    ap.add_argument("--serve-arg", action="append", default=[], help="extra argument for serve (repeatable)")
    ap.add_argument("--output-json", help="write every figure here")
    args = ap.parse_args()
    client = args.client
    if client == "auto":
        client = "wrk" if shutil.which("wrk") else "python"
    print(f"client: {client}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} before the runs")
    results = []
    for url in args.urls:
        r = run_backend(url, args, client)
        results.append(r)
        for name in ("single", "batch"):
            f = r[name]
            print(f"{r['backend']:45s} {name:6s} {f['requests_per_s']:>9.0f} req/s "
                  f"{f['activities_per_s']:>9.0f} act/s "
                  f"p50 {f['p50_ms']:6.2f} p99 {f['p99_ms']:7.2f} ms  failed {f['failed']}  "
                  f"server CPU {f['server_cpu_ms_per_request']:.3f} ms/req "
                  f"({f['server_cpu_us_per_activity']:.1f} us/act)"
                  f"  client CPU {f['client_cpu_ms_per_request']:.3f} ms/req")
        print(f"{'':45s} stored {r['stored']}, acknowledged {r['acknowledged']} (requests still in flight "
              "when a run ends are stored unanswered: at most one per connection)")
    if args.output_json:
        report = {"argv": sys.argv, "client": client, "python": sys.version.split()[0],
                  "platform": platform.platform(), "load_avg_after": os.getloadavg(), "results": results}
        Path(args.output_json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
