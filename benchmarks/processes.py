"""Drain rate of ``runnerq-fast worker --processes 1`` against ``--processes 2``, per backend, in one run.

::

    .venv/bin/python benchmarks/processes.py -n 20000 --rounds 3 --output-json procs.json

Each run enqueues ``n`` no-op activities (``benchmarks/noop_app.py``, default
engine configuration) on a fresh store — a fresh PostgreSQL database, a fresh
Redis queue (its keys deleted afterwards), a fresh SQLite file — then starts
``runnerq-fast worker benchmarks.noop_app:engine --processes P`` as a real
subprocess (a supervisor and P spawned children) and polls the store's
``completed`` count every ``--poll`` seconds. The drain rate is the slope
from the first sample taken once every child's engine has started (and at
least 10 % is completed) to 90 % completed, so the children's start-up (spawn,
import, connect; the first child may drain alone meanwhile) and the tail are
left out. Runs are interleaved: for each round, for each backend, P = 1 then
P = 2, so a change in the machine's load hits both. Each run also records the
CPU seconds its processes used (supervisor and children, start-up included)
and the 1-minute load average when it began.

PostgreSQL comes from ``--pg`` (the maintenance database; default
``postgresql://postgres@127.0.0.1:5432/postgres``), Redis from ``--redis``;
``--backends`` picks which of ``postgresql,redis,sqlite`` run.
"""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import click
import msgspec
import redis
from rich.console import Console
from rich.table import Table

import runnerq_fast as rq

REPO = Path(__file__).resolve().parents[1]
APP = "benchmarks.noop_app:engine"


class Run(msgspec.Struct, kw_only=True, frozen=True):
    """One drain.

    Attributes
    ----------
    backend : str
        ``postgresql``, ``redis`` or ``sqlite``.
    processes : int
        Worker processes under the supervisor.
    round : int
        1-based round number.
    n : int
        Activities drained.
    drain_per_s : float
        Activities completed per second over ``window``.
    wall_s : float
        Seconds from starting the supervisor to the last activity completed (includes start-up).
    window : tuple of int
        Completed counts at the start and the end of the measured window.
    worker_cpu_s : float
        User + system CPU seconds of the supervisor and its children.
    load_1m : float
        1-minute load average when the run began (other processes on the machine).
    """

    backend: str
    processes: int
    round: int
    n: int
    drain_per_s: float
    wall_s: float
    window: tuple[int, int]
    worker_cpu_s: float
    load_1m: float


class Report(msgspec.Struct, kw_only=True, frozen=True):
    """Every run of one invocation, with the machine it ran on."""

    generated_at: str
    argv: list[str]
    cpu_count: int
    load_average: tuple[float, float, float]
    runs: list[Run]


async def _enqueue(url: str, queue: str, n: int) -> None:
    backend = await rq.connect(url)  # migrates a fresh SQL store before the workers start
    try:
        ex = rq.ActivityExecutor(backend, queue)
        for start in range(0, n, 1000):
            await ex.enqueue_many([("noop", None)] * min(1000, n - start))
    finally:
        await backend.close()


async def _completed(backend: rq.Backend, queue: str) -> int:
    return (await backend.stats(queue)).completed


def _drain(
    url: str, queue: str, n: int, processes: int, poll: float, log: Path
) -> tuple[float, float, tuple[int, int], float]:
    """Start the supervisor, watch the store until ``n`` completed.

    Returns
    -------
    tuple
        (drain/s, wall seconds, measured window, CPU seconds of the workers).
    """
    asyncio.run(_enqueue(url, queue, n))
    cmd = [sys.executable, "-m", "runnerq_fast.cli", "worker", APP, "--backend", url, "--queue", queue,
           "--processes", str(processes), "--log-level", "info"]
    env = {k: v for k, v in os.environ.items() if k != "RUNNERQ_BACKEND"}
    log.write_bytes(b"")
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    with log.open("ab") as out:
        began = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            samples = asyncio.run(_watch(url, queue, n, poll, proc, log, processes))
        finally:
            proc.terminate()
            proc.wait(60)
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    lo = next((s for s in samples if s[2] and s[1] >= 0.1 * n), samples[-1])
    hi = next(s for s in samples if s[1] >= 0.9 * n)
    rate = (hi[1] - lo[1]) / (hi[0] - lo[0]) if hi[0] > lo[0] and hi[1] > lo[1] else float("nan")
    return rate, samples[-1][0] - began, (lo[1], hi[1]), cpu


async def _watch(url: str, queue: str, n: int, poll: float, proc: subprocess.Popen[bytes], log: Path,
                 processes: int) -> list[tuple[float, int, bool]]:
    """Samples (monotonic time, completed, every child's engine had started)."""
    backend = await rq.connect(url)
    samples: list[tuple[float, int, bool]] = []
    all_up = False
    try:
        while True:
            if not all_up:
                all_up = log.read_bytes().count(b"] runnerq_fast.engine: engine ") >= processes
            done = await _completed(backend, queue)
            samples.append((time.monotonic(), done, all_up))
            if done >= n:
                return samples
            if proc.poll() is not None:
                raise RuntimeError(f"the worker exited with {proc.returncode} after {done} of {n}")
            await asyncio.sleep(poll)
    finally:
        await backend.close()


async def _pg_admin(admin_url: str, sql: str) -> None:
    conn = await asyncpg.connect(admin_url, timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@click.command()
@click.option("-n", "n", type=click.IntRange(min=100), default=20_000, show_default=True, help="Activities per run.")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--backends", default="postgresql,redis,sqlite", show_default=True, help="Comma-separated.")
@click.option("--pg", "pg_admin", default="postgresql://postgres@127.0.0.1:5432/postgres", show_default=True)
@click.option("--redis", "redis_url", default="redis://127.0.0.1:6379/0", show_default=True)
@click.option("--poll", type=click.FloatRange(min=0.01), default=0.05, show_default=True,
              help="Seconds between two reads of the completed count.")
@click.option("--output-json", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE")
def main(n: int, rounds: int, backends: str, pg_admin: str, redis_url: str, poll: float,
         output_json: Path | None) -> None:
    """Drain n no-op activities with 1 and with 2 worker processes on each backend, interleaved."""
    console = Console(stderr=True, soft_wrap=True)
    chosen = [b.strip() for b in backends.split(",") if b.strip()]
    unknown = set(chosen) - {"postgresql", "redis", "sqlite"}
    if unknown:
        raise click.BadParameter(f"unknown backends: {', '.join(sorted(unknown))}", param_hint="--backends")
    runs: list[Run] = []
    tmp = Path(tempfile.mkdtemp(prefix="rq-procbench-"))
    log = tmp / "worker.log"
    r = redis.Redis.from_url(redis_url)
    try:
        for rnd in range(1, rounds + 1):
            for backend in chosen:
                for processes in (1, 2):
                    queue = f"procbench-{uuid.uuid4().hex[:10]}"
                    db = f"rq_procbench_{uuid.uuid4().hex[:10]}"
                    if backend == "postgresql":
                        asyncio.run(_pg_admin(pg_admin, f'CREATE DATABASE "{db}"'))
                        url = urlunsplit(urlsplit(pg_admin)._replace(path="/" + db))
                    elif backend == "redis":
                        url = redis_url
                    else:
                        url = f"sqlite:///{tmp / (queue + '.db')}"
                    load = os.getloadavg()[0]
                    try:
                        rate, wall, window, cpu = _drain(url, queue, n, processes, poll, log)
                    finally:
                        if backend == "postgresql":
                            asyncio.run(_pg_admin(pg_admin, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
                        elif backend == "redis":
                            for key in r.scan_iter(match=f"rq:{{{queue}}}:*", count=1000):
                                r.unlink(key)
                            r.srem("rq:queues", queue)
                    runs.append(Run(backend=backend, processes=processes, round=rnd, n=n, drain_per_s=rate,
                                    wall_s=wall, window=window, worker_cpu_s=cpu, load_1m=load))
                    console.print(f"round {rnd} {backend:<10} processes={processes}: {rate:,.0f}/s over "
                                  f"{window[0]:,}..{window[1]:,} (wall {wall:.1f} s, workers' CPU {cpu:.1f} s, "
                                  f"load {load:.1f})")
    finally:
        r.close()
    table = Table(title=f"drain/s, n={n:,}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    for col in ("backend", "1 process", "2 processes", "ratio 2/1"):
        table.add_column(col, justify="left" if col == "backend" else "right")
    for backend in chosen:
        for rnd in range(1, rounds + 1):
            one, two = (next(x.drain_per_s for x in runs if (x.backend, x.round, x.processes) == (backend, rnd, p))
                        for p in (1, 2))
            table.add_row(f"{backend} (round {rnd})", f"{one:,.0f}", f"{two:,.0f}", f"{two / one:.2f}")
    console.print(table)
    report = Report(generated_at=datetime.now(UTC).isoformat(timespec="seconds"), argv=sys.argv,
                    cpu_count=os.cpu_count() or 1, load_average=os.getloadavg(), runs=runs)
    data = msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n"
    if output_json is None:
        sys.stdout.buffer.write(data)
    else:
        output_json.write_bytes(data)
        console.print(f"wrote {output_json}")


if __name__ == "__main__":
    main()
