"""SSE fan-out under load: N open event streams while 20,000 activities are enqueued over HTTP.

::

    .venv/bin/python benchmarks/sse_fanout.py --streams 200 500 --output-json sse.json
    PYTHONPATH=/work/main .venv/bin/python benchmarks/sse_fanout.py --streams 200   # another checkout's code

For each stream count (after a run with none, the baseline): start
``runnerq-fast serve`` on a fresh SQLite file (or ``--backend``), enqueue one
marker activity and read its event id, then

* a **stream client** in its own process opens N streams of
  ``/api/observability/stream`` with ``Last-Event-ID`` = the marker's event,
  so every stream must deliver exactly the ``--enqueues`` events that follow;
* this process enqueues ``--enqueues`` (20,000) activities with
  ``--connections`` (16) keep-alive connections of single ``POST``s, and
  meanwhile sends a plain ``GET /api/observability/stats`` every 20 ms on
  another connection (its latency p50/p99);
* once every stream has its events (or ``--drain-timeout``), the server's
  user+system CPU seconds since the enqueues began (psutil on the serve pid)
  are read, and reported per event per stream after subtracting the
  baseline's CPU for the same enqueues.

Per stream the client counts events, duplicates (an id not above the one
before: ids increase in stream order on SQLite, memory and Redis) and gaps
(events expected but not received), and whether the stream was told to
``resync``; gaps and duplicates must be 0 on every stream that was not.

The three processes share the machine's cores: the stream client's own CPU
seconds and the host's load are reported with each run so a run on a busy
machine can be read correctly, and ``--pin`` puts the server on one CPU and
both clients on the others (``os.sched_setaffinity``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

BODY = b'{"type":"noop","payload":{"order":12345,"note":"benchmark"}}'
QUEUE = "fanout"
ID_RE = re.compile(rb"(?m)^id: (\d+)$")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``runnerq-fast serve`` on a free port; ``cpu()`` is its user+system CPU seconds so far."""

    def __init__(self, url: str, cpus: set[int] | None) -> None:
        self.port = _free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="rq-sse-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runnerq_fast.cli", "serve", "--backend", url, "--queue", QUEUE,
             "--port", str(self.port), "--log-level", "warning"],
            stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.ps = psutil.Process(self.proc.pid)
        if cpus:
            self.ps.cpu_affinity(sorted(cpus))
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


# ------------------------------------------------------------ HTTP, by hand
async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes,
                   body: bytes = b"") -> tuple[int, bytes]:
    writer.write(head + body)
    raw = await reader.readuntil(b"\r\n\r\n")
    status = int(raw[9:12])
    m = re.search(rb"(?i)content-length: (\d+)", raw)
    data = await reader.readexactly(int(m.group(1))) if m else b""
    return status, data


def _get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


async def _http_json(port: int, path: str, body: bytes | None = None) -> Any:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        if body is None:
            status, data = await _request(reader, writer, _get(path))
        else:
            head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n").encode()
            status, data = await _request(reader, writer, head, body)
        if status >= 300:
            raise RuntimeError(f"{path}: {status} {data[:200]!r}")
        return json.loads(data)
    finally:
        writer.close()


async def _enqueue_and_probe(port: int, n: int, connections: int) -> dict[str, Any]:
    """``n`` single POSTs over ``connections`` connections; a plain GET every 20 ms meanwhile."""
    path = f"/api/v1/queues/{QUEUE}/activities"
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(BODY)}\r\n\r\n").encode()
    left = [n]
    failed = [0]

    async def one() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while left[0] > 0:
            left[0] -= 1
            status, _ = await _request(reader, writer, head, BODY)
            if status != 201:
                failed[0] += 1
        writer.close()

    latencies: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        get = _get(f"/api/observability/stats?queue={QUEUE}")
        while not done.is_set():
            t0 = time.perf_counter()
            status, _ = await _request(reader, writer, get)
            latencies.append(time.perf_counter() - t0)
            assert status == 200
            await asyncio.sleep(0.02)
        writer.close()

    prober = asyncio.create_task(probe())
    t0 = time.perf_counter()
    await asyncio.gather(*[one() for _ in range(connections)])
    elapsed = time.perf_counter() - t0
    done.set()
    await prober
    latencies.sort()

    def pct(p: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000, 1) if latencies else 0.0

    return {"enqueue_s": round(elapsed, 3), "enqueue_per_s": round(n / elapsed), "failed": failed[0],
            "get_samples": len(latencies), "get_p50_ms": pct(0.5), "get_p99_ms": pct(0.99),
            "get_max_ms": pct(1.0)}


# ------------------------------------------------------------ stream client
class _Stream(asyncio.Protocol):
    def __init__(self, expected: int, done: asyncio.Event, opened: asyncio.Event, left: list[int]) -> None:
        self.expected, self.done, self.opened, self.left = expected, done, opened, left
        self.buf = b""
        self.header = True
        self.count = self.dups = 0
        self.last = -1
        self.resynced = False
        self.finished = False

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data
        if self.header:
            if b"\r\n\r\n" not in buf:
                self.buf = buf
                return
            head, _, buf = buf.partition(b"\r\n\r\n")
            if head[9:12] != b"200":
                raise RuntimeError(f"stream refused: {head[:100]!r}")
            self.header = False
            self.opened.set()
        cut = buf.rfind(b"\n\n")
        if cut < 0:
            self.buf = buf
            return
        whole, self.buf = buf[:cut + 2], buf[cut + 2:]
        for m in ID_RE.finditer(whole):
            i = int(m.group(1))
            if i <= self.last:
                self.dups += 1
            else:
                self.last = i
            self.count += 1
        if b"event: resync" in whole:
            self.resynced = True
        self._check()

    def _check(self) -> None:
        if not self.finished and (self.resynced or self.count - self.dups >= self.expected):
            self.finished = True
            self.left[0] -= 1
            if self.left[0] == 0:
                self.done.set()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.finished:
            self.finished = True
            self.left[0] -= 1
            if self.left[0] == 0:
                self.done.set()


async def _streams_main(port: int, n: int, after: int, expected: int, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    left = [n]
    streams: list[_Stream] = []
    request = (f"GET /api/observability/stream?queue={QUEUE} HTTP/1.1\r\nHost: x\r\n"
               f"Last-Event-ID: {after}\r\nAccept: text/event-stream\r\n\r\n").encode()
    for _ in range(n):
        opened = asyncio.Event()
        s = _Stream(expected, done, opened, left)
        transport, _ = await loop.create_connection(lambda s=s: s, "127.0.0.1", port)  # type: ignore[misc]
        transport.write(request)
        await asyncio.wait_for(opened.wait(), 30)
        streams.append(s)
    print("ready", flush=True)
    line = await loop.run_in_executor(None, sys.stdin.readline)  # "go" once the enqueues start
    assert line.strip() == "go"
    t0 = time.perf_counter()
    timed_out = False
    try:
        await asyncio.wait_for(done.wait(), timeout)
    except TimeoutError:
        timed_out = True
    clean = [s for s in streams if not s.resynced]
    out = {
        "streams": n,
        "drained_s": round(time.perf_counter() - t0, 3),
        "timed_out": timed_out,
        "resynced": n - len(clean),
        "events_received": sum(s.count for s in streams),
        "duplicates": sum(s.dups for s in clean),
        "gaps": sum(max(0, expected - (s.count - s.dups)) for s in clean),
        "streams_with_gaps_or_duplicates": sum(1 for s in clean if s.dups or s.count - s.dups != expected),
        "client_cpu_s": round(sum(os.times()[:2]), 2),
    }
    print(json.dumps(out), flush=True)


# ------------------------------------------------------------------- a run
def run_once(url: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0))
    server_cpus = {cpus[0]} if args.pin and len(cpus) > 1 else None
    client_cpus = set(cpus[1:]) if server_cpus else None
    if client_cpus:
        os.sched_setaffinity(0, client_cpus)
    server = Server(url, server_cpus)
    try:
        marker = asyncio.run(_http_json(server.port, f"/api/v1/queues/{QUEUE}/activities",
                                        b'{"type":"marker","payload":null}'))
        events = asyncio.run(_http_json(server.port, f"/api/observability/activities/{marker['id']}/events"))
        after = max(e["id"] for e in events)
        client = None
        if n:
            client = subprocess.Popen(
                [sys.executable, __file__, "--_stream-client", str(server.port), str(n), str(after),
                 str(args.enqueues), str(args.drain_timeout)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            )
            if client_cpus:
                psutil.Process(client.pid).cpu_affinity(sorted(client_cpus))
            assert client.stdout is not None and client.stdin is not None
            if client.stdout.readline().strip() != "ready":
                raise RuntimeError("the stream client did not open its streams")
            time.sleep(0.5)  # let the replays hand over to the shared reader (a no-op before it)
        cpu0 = server.cpu()
        load0 = os.getloadavg()[0]
        if client is not None:
            assert client.stdin is not None
            client.stdin.write("go\n")
            client.stdin.flush()
        res = asyncio.run(_enqueue_and_probe(server.port, args.enqueues, args.connections))
        cpu_enqueue = server.cpu() - cpu0
        res["streams"] = n
        if client is not None:
            assert client.stdout is not None
            out, _ = client.communicate(timeout=args.drain_timeout + 60)
            res.update(json.loads(out.strip().splitlines()[-1]))
        res["server_cpu_s"] = round(server.cpu() - cpu0, 2)
        res["server_cpu_enqueue_phase_s"] = round(cpu_enqueue, 2)
        res["load_avg_1m"] = round(max(load0, os.getloadavg()[0]), 2)
        return res
    finally:
        server.stop()
        if client_cpus:
            os.sched_setaffinity(0, set(cpus))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--_stream-client":
        port, n, after, expected, timeout = sys.argv[2:7]
        import uvloop

        uvloop.run(_streams_main(int(port), int(n), int(after), int(expected), float(timeout)))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, nargs="+", default=[500], help="stream counts to run (after 0)")
    ap.add_argument("--enqueues", type=int, default=20_000)
    ap.add_argument("--connections", type=int, default=16, help="keep-alive connections that enqueue")
    ap.add_argument("--backend", help="backend URL (default: a fresh SQLite file per run)")
    ap.add_argument("--drain-timeout", type=float, default=300.0,
                    help="seconds the streams may take to deliver every event after the enqueues began")
    ap.add_argument("--pin", action="store_true", help="server on the first CPU, the clients on the others")
    ap.add_argument("--output-json", help="write every figure here")
    args = ap.parse_args()
    if args.enqueues < 1 or args.connections < 1 or any(n < 0 for n in args.streams):
        ap.error("--enqueues and --connections must be >= 1 and --streams >= 0")
    import runnerq_fast

    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rq-sse-") as tmp:
        for k, n in enumerate([0, *args.streams]):
            url = args.backend or f"sqlite:///{tmp}/run{k}.db"
            res = run_once(url, n, args)
            runs.append(res)
            base = runs[0]
            if n:
                res["enqueue_ratio"] = round(res["enqueue_s"] / base["enqueue_s"], 2)
                extra = res["server_cpu_s"] - base["server_cpu_s"]
                res["server_cpu_us_per_event_per_stream"] = round(extra / (args.enqueues * n) * 1e6, 3)
            print(json.dumps(res), flush=True)
    report = {"code": str(Path(runnerq_fast.__file__).parent), "enqueues": args.enqueues,
              "connections": args.connections, "pin": args.pin, "cpus": os.cpu_count(), "runs": runs}
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
