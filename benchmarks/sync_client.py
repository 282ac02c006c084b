"""Enqueue throughput of :class:`runnerq_fast.SyncExecutor` from plain threads, per backend, in one run.

::

    .venv/bin/python benchmarks/sync_client.py memory:// sqlite:////tmp/rq-sync.db \\
        postgresql://postgres@127.0.0.1:5432/test redis://127.0.0.1:6379/0 -n 20000 --threads 8 --threads 1

For each URL and thread count: one client, ``--threads`` threads each
calling ``client.activity("noop").payload({...}).execute()`` one activity at a
time (what a web view does) on a fresh ``syncbench-<random>`` queue, timed
from the first call to the last return. The client coalesces the calls of
concurrent threads into one backend round trip per batch, so more threads
give more enqueues per second until the backend is the limit. The
``async 1`` row of each backend is the baseline measured in the same run: one
coroutine awaiting ``ActivityExecutor`` enqueues one at a time on the same
backend (what the client costs over it). Nothing is drained or deleted.
``--output-json`` writes every figure.
"""

from __future__ import annotations

import platform
import sys
import threading
import time
import uuid
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import msgspec
from rich.console import Console
from rich.table import Table

import runnerq_fast as rq
from runnerq_fast.engine import run_with_uvloop
from runnerq_fast.urls import redact_url


class SyncRun(msgspec.Struct, kw_only=True, frozen=True):
    """One measurement: ``n`` enqueues from ``threads`` threads on ``backend``."""

    backend: str
    client: str
    threads: int
    n: int
    seconds: float
    enqueue_per_s: float
    speedups: bool


class SyncReport(msgspec.Struct, kw_only=True, frozen=True):
    """Every run of one invocation, with the command line and the machine."""

    generated_at: str
    argv: list[str]
    python: str
    machine: str
    runs: list[SyncRun]


def measure(url: str, n: int, threads: int) -> SyncRun:
    """Enqueue ``n`` activities through one :class:`SyncExecutor` from ``threads`` threads."""
    queue = f"syncbench-{uuid.uuid4().hex[:8]}"
    per_thread = [n // threads + (1 if i < n % threads else 0) for i in range(threads)]
    with rq.SyncExecutor(url, queue) as client:
        client.activity("noop").payload({"warm": True}).execute()  # connections open, scripts loaded
        barrier = threading.Barrier(threads + 1)

        def work(count: int) -> None:
            barrier.wait()
            for i in range(count):
                client.activity("noop").payload({"i": i}).execute()

        pool = [threading.Thread(target=work, args=(c,)) for c in per_thread]
        for t in pool:
            t.start()
        barrier.wait()
        started = time.perf_counter()
        for t in pool:
            t.join()
        seconds = time.perf_counter() - started
        name = client.backend_name
    return SyncRun(backend=f"{name} {redact_url(url)}", client="sync", threads=threads, n=n, seconds=seconds,
                   enqueue_per_s=n / seconds, speedups=rq.speedups.enabled)


def measure_async(url: str, n: int) -> SyncRun:
    """The baseline: ``n`` enqueues awaited one at a time through an :class:`ActivityExecutor`."""

    async def go() -> tuple[str, float]:
        backend = await rq.connect(url)
        try:
            ex = rq.ActivityExecutor(backend, f"syncbench-{uuid.uuid4().hex[:8]}")
            await ex.activity("noop").payload({"warm": True}).execute()
            started = time.perf_counter()
            for i in range(n):
                await ex.activity("noop").payload({"i": i}).execute()
            return backend.name, time.perf_counter() - started
        finally:
            await backend.close()

    result: list[tuple[str, float]] = []
    run_with_uvloop(_into(go(), result))
    name, seconds = result[0]
    return SyncRun(backend=f"{name} {redact_url(url)}", client="async", threads=1, n=n, seconds=seconds,
                   enqueue_per_s=n / seconds, speedups=rq.speedups.enabled)


async def _into(coro: Coroutine[Any, Any, tuple[str, float]], out: list[tuple[str, float]]) -> None:
    out.append(await coro)


@click.command()
@click.argument("urls", nargs=-1, required=True)
@click.option("-n", "n", type=click.IntRange(min=1), default=20000, show_default=True, help="Enqueues per run.")
@click.option("--threads", "thread_counts", type=click.IntRange(min=1), multiple=True, default=(8,),
              show_default=True, help="Threads enqueueing at once (repeatable).")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Rounds over every URL and thread count (interleaved).")
@click.option("--output-json", type=click.Path(dir_okay=False, path_type=Path), help="Write every figure here.")
def main(urls: tuple[str, ...], n: int, thread_counts: tuple[int, ...], repeat: int, output_json: Path | None) -> None:
    """Measure SyncExecutor enqueues/s from threads on each backend URL."""
    runs: list[SyncRun] = []
    for _ in range(repeat):
        for url in urls:
            runs.append(measure_async(url, n))
            for threads in thread_counts:
                runs.append(measure(url, n, threads))
    table = Table(title=f"SyncExecutor enqueue, n={n} per run")
    for col in ("backend", "client", "threads", "seconds", "enqueue/s"):
        table.add_column(col, justify="left" if col in ("backend", "client") else "right")
    for r in runs:
        table.add_row(r.backend, r.client, str(r.threads), f"{r.seconds:.2f}", f"{r.enqueue_per_s:,.0f}")
    Console().print(table)
    if output_json is not None:
        report = SyncReport(generated_at=datetime.now(UTC).isoformat(), argv=sys.argv, python=sys.version.split()[0],
                            machine=platform.platform(), runs=runs)
        output_json.write_bytes(msgspec.json.format(msgspec.json.encode(report)))


if __name__ == "__main__":
    main()
