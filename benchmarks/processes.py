"""Drain rate of ``runnerq-fast worker --processes 1`` against ``--processes 2``, per backend, in one run.

::

    .venv/bin/python benchmarks/processes.py -n 100000 --rounds 3 --redis redis://127.0.0.1:PORT/0 --output-json p.json

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

Within the measured window every poll also reads ``/proc``: the CPU of the
supervisor and its children, of the store's server (the local
``redis-server``, or the PostgreSQL backends connected to the run's
database), and of the whole machine; and, on PostgreSQL, the wait event of
every active backend of the run (``pg_stat_activity``). Each run so reports
the CPU microseconds per activity on both sides, how many cores the machine
had busy, and the ceiling those costs set on this machine
(``cpu_count / (client + server)``, for Redis also ``1 / server``: it
executes commands on one thread). With one process using what the machine
has, a second one cannot add anything; the ``ceiling / 1 process`` column is
the most it could (on a quiet machine). Use a private ``redis-server``
(``--redis``): the server CPU is that of the whole server.

PostgreSQL comes from ``--pg`` (the maintenance database; default
``postgresql://postgres@127.0.0.1:5432/postgres``), Redis from ``--redis``;
``--backends`` picks which of ``postgresql,redis,sqlite`` run.
"""

from __future__ import annotations

import asyncio
import math
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
    window_s : float
        Seconds the measured window lasted.
    client_cpu_us : float
        CPU microseconds per activity the worker processes (supervisor and
        children) used within the window (``/proc/<pid>/stat``; start-up left out).
    server_cpu_us : float
        CPU microseconds per activity the store's server used within the
        window: the ``redis-server`` process, or the PostgreSQL backends
        connected to the run's database (the shared WAL writer and checkpointer
        are not counted); ``nan`` for SQLite or when ``/proc`` is not readable.
    cores_needed : float
        ``drain_per_s * (client_cpu_us + server_cpu_us) / 1e6``: cores the
        drain kept busy (SQLite: the workers' alone, its store works inside them).
    machine_busy : float
        Cores the whole machine kept busy within the window (``/proc/stat``:
        everything but idle and iowait, every process of every user); a
        figure near ``os.cpu_count()`` means the window had no CPU to spare.
    server_share : float
        Share of one core the store's server processes used within the window
        (Redis executes commands on one thread: near 1.0 it is saturated).
    ceiling_per_s : float
        The most the drain could reach on this machine at the window's costs
        per activity: ``os.cpu_count() / (client + server)`` per second, and
        for Redis at most ``1 / server`` (one thread). Divide by the 1-process
        rate for the most ``--processes 2`` could gain (only meaningful on a
        quiet machine, where the 1-process run had the cores to itself).
    store_work : dict of str to float
        Work the store did per activity over the whole drain (start-up
        included, enqueue excluded), counts that do not depend on the
        machine's load. PostgreSQL, from ``pg_stat_database`` of the run's
        database (read after the workers exited, so every backend's counts are
        in): ``blks_hit``, ``blks_read``, ``tup_fetched``, ``tup_returned``,
        ``tup_updated``, ``xact_commit``. Redis, from ``INFO commandstats``
        (the whole server: use a private one): ``calls`` (commands, those run
        inside scripts included) and ``evalsha`` (scripts run).
    wait_events : dict of str to int
        PostgreSQL only: how often each ``wait_event_type:wait_event`` (or
        ``cpu`` for none) of the run's active backends was seen across the
        window's samples (lock waits show up as ``Lock:...``).
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
    window_s: float = float("nan")
    client_cpu_us: float = float("nan")
    server_cpu_us: float = float("nan")
    cores_needed: float = float("nan")
    machine_busy: float = float("nan")
    server_share: float = float("nan")
    ceiling_per_s: float = float("nan")
    store_work: dict[str, float] = msgspec.field(default_factory=dict)
    wait_events: dict[str, int] = msgspec.field(default_factory=dict)


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


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
WATCHER = "procbench-watch"  # application_name of the watcher's own PostgreSQL connection (not counted)


def _cpu_ticks(pid: int) -> int | None:
    """utime + stime of ``pid`` in clock ticks, or ``None`` if it is gone (or not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of every CPU since boot, from the first line of ``/proc/stat``."""
    try:
        with open("/proc/stat", "rb") as fh:
            fields = [int(x) for x in fh.readline().split()[1:8]]
    except OSError:
        return 0, 0
    return sum(fields) - fields[3] - fields[4], sum(fields)


def _children_of(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (a scan of ``/proc``)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    if int(fh.read().rsplit(b")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except OSError:
                continue
    return found


class Sample(msgspec.Struct, array_like=True):
    """One poll of the watcher."""

    at: float  # monotonic seconds
    done: int  # completed count
    all_up: bool  # every child's engine had started
    client: dict[int, int]  # pid -> CPU ticks of the supervisor and children
    server: dict[int, int]  # pid -> CPU ticks of the store's server processes
    waits: list[str]  # PostgreSQL: wait event of every active backend of the run
    machine: tuple[int, int]  # (busy, total) ticks of the whole machine


def _window_cpu(lo: Sample, hi: Sample, which: str) -> float:
    """CPU seconds between two samples, summed over the pids ``hi`` saw (a pid new since ``lo`` counts whole)."""
    a: dict[int, int] = getattr(lo, which)
    b: dict[int, int] = getattr(hi, which)
    return sum(t - a.get(pid, 0) for pid, t in b.items()) / _TICK


def _drain(url: str, queue: str, n: int, processes: int, poll: float, log: Path,
           server_pid: int | None) -> tuple[Run, list[Sample]]:
    """Start the supervisor, watch the store until ``n`` completed.

    Returns
    -------
    tuple
        The run (``backend``, ``round`` and ``load_1m`` to be filled in) and its samples.
    """
    asyncio.run(_enqueue(url, queue, n))
    cmd = [sys.executable, "-m", "runnerq_fast.cli", "worker", APP, "--backend", url, "--queue", queue,
           "--processes", str(processes), "--log-level", "info"]
    env = {k: v for k, v in os.environ.items() if k != "RUNNERQ_BACKEND"}
    log.write_bytes(b"")
    work0 = _store_counters(url)
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    with log.open("ab") as out:
        began = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            samples = asyncio.run(_watch(url, queue, n, poll, proc, log, processes, server_pid))
        finally:
            proc.terminate()
            proc.wait(60)
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    if url.startswith(("postgresql:", "postgres:")):
        time.sleep(0.6)  # the watcher's backend reports its counts when its connection closes
    work1 = _store_counters(url)
    work = {k: (work1[k] - v) / n for k, v in work0.items() if k in work1}
    lo = next((s for s in samples if s.all_up and s.done >= 0.1 * n), samples[-1])
    hi = next(s for s in samples if s.done >= 0.9 * n)
    ok = hi.at > lo.at and hi.done > lo.done
    rate = (hi.done - lo.done) / (hi.at - lo.at) if ok else float("nan")
    nan = float("nan")
    client = _window_cpu(lo, hi, "client") / (hi.done - lo.done) * 1e6 if ok else nan
    server = _window_cpu(lo, hi, "server") / (hi.done - lo.done) * 1e6 if ok and hi.server else nan
    span = hi.at - lo.at
    server_s = _window_cpu(lo, hi, "server") if hi.server else nan
    busy = (hi.machine[0] - lo.machine[0]) / _TICK / span if ok and hi.machine[1] else nan
    both = client + (0.0 if math.isnan(server) else server)  # SQLite: no server, the store works in the workers
    ceiling = (os.cpu_count() or 1) * 1e6 / both
    if url.startswith("redis") and server > 0:
        ceiling = min(ceiling, 1e6 / server)
    waits: dict[str, int] = {}
    for s in samples:
        if lo.at <= s.at <= hi.at:
            for w in s.waits:
                waits[w] = waits.get(w, 0) + 1
    run = Run(backend="", processes=processes, round=0, n=n, drain_per_s=rate, wall_s=samples[-1].at - began,
              window=(lo.done, hi.done), worker_cpu_s=cpu, load_1m=nan, window_s=hi.at - lo.at,
              client_cpu_us=client, server_cpu_us=server, cores_needed=rate * both / 1e6,
              store_work=work, machine_busy=busy, server_share=server_s / span if ok else nan, ceiling_per_s=ceiling,
              wait_events=dict(sorted(waits.items(), key=lambda kv: -kv[1])))
    return run, samples


async def _watch(url: str, queue: str, n: int, poll: float, proc: subprocess.Popen[bytes], log: Path,
                 processes: int, server_pid: int | None) -> list[Sample]:
    """Poll the completed count, the CPU of the workers and of the store's server until ``n`` completed."""
    pg = url.startswith(("postgresql:", "postgres:"))
    if pg:
        backend = await rq.connect(url, server_settings={"application_name": WATCHER})
        conn = await asyncpg.connect(url, timeout=5)
    else:
        backend = await rq.connect(url)
        conn = None
    samples: list[Sample] = []
    all_up = False
    workers: list[int] = [proc.pid]
    try:
        while True:
            if not all_up:
                all_up = log.read_bytes().count(b"] runnerq_fast.engine: engine ") >= processes
                # until every engine started (then once more): the children, and the resource tracker
                # multiprocessing may start, all count
                workers = [proc.pid, *_children_of(proc.pid)]
            client = {p: t for p in workers if (t := _cpu_ticks(p)) is not None}
            server: dict[int, int] = {}
            waits: list[str] = []
            if conn is not None:
                rows = await conn.fetch(
                    "SELECT pid, state, wait_event_type, wait_event FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND application_name <> $1", WATCHER)
                server = {r["pid"]: t for r in rows if (t := _cpu_ticks(r["pid"])) is not None}
                waits = [f"{r['wait_event_type']}:{r['wait_event']}" if r["wait_event"] else "cpu"
                         for r in rows if r["state"] == "active"]
            elif server_pid is not None and (t := _cpu_ticks(server_pid)) is not None:
                server = {server_pid: t}
            done = await _completed(backend, queue)
            samples.append(Sample(time.monotonic(), done, all_up, client, server, waits, _machine_ticks()))
            if done >= n:
                return samples
            if proc.poll() is not None:
                raise RuntimeError(f"the worker exited with {proc.returncode} after {done} of {n}")
            await asyncio.sleep(poll)
    finally:
        if conn is not None:
            await conn.close()
        await backend.close()


def _redis_pid(r: redis.Redis) -> int | None:
    """The pid of the Redis server if it runs on this machine (its ``/proc/<pid>`` is a redis-server)."""
    try:
        pid = int(r.info("server")["process_id"])
        with open(f"/proc/{pid}/comm", "rb") as fh:
            return pid if b"redis" in fh.read() else None
    except (OSError, KeyError, ValueError, redis.RedisError):
        return None


_PG_COUNTERS = ("blks_hit", "blks_read", "tup_fetched", "tup_returned", "tup_updated", "xact_commit")


def _store_counters(url: str) -> dict[str, float]:
    """The store's cumulative work counters (see ``Run.store_work``); empty for SQLite."""
    if url.startswith(("postgresql:", "postgres:")):
        async def read() -> dict[str, float]:
            conn = await asyncpg.connect(url, timeout=5)
            try:
                await conn.execute("SELECT pg_stat_clear_snapshot()")
                row = await conn.fetchrow(f"SELECT {', '.join(_PG_COUNTERS)} FROM pg_stat_database "
                                          "WHERE datname = current_database()")
            finally:
                await conn.close()
            return {k: float(row[k]) for k in _PG_COUNTERS} if row is not None else {}
        return asyncio.run(read())
    if url.startswith("redis"):
        r = redis.Redis.from_url(url)
        try:
            stats = r.info("commandstats")
        finally:
            r.close()
        return {"calls": float(sum(v["calls"] for v in stats.values())),
                "evalsha": float(stats.get("cmdstat_evalsha", {}).get("calls", 0))}
    return {}


async def _pg_admin(admin_url: str, sql: str) -> None:
    conn = await asyncpg.connect(admin_url, timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@click.command()
@click.option("-n", "n", type=click.IntRange(min=100), default=100_000, show_default=True,
              help="Activities per run (at 30k/s, 20,000 leave a window of half a second: sampled every --poll).")
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
    console = Console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else 140)
    chosen = [b.strip() for b in backends.split(",") if b.strip()]
    unknown = set(chosen) - {"postgresql", "redis", "sqlite"}
    if unknown:
        raise click.BadParameter(f"unknown backends: {', '.join(sorted(unknown))}", param_hint="--backends")
    runs: list[Run] = []
    tmp = Path(tempfile.mkdtemp(prefix="rq-procbench-"))
    log = tmp / "worker.log"
    r = redis.Redis.from_url(redis_url)
    server_pid = _redis_pid(r) if "redis" in chosen else None
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
                        run, _ = _drain(url, queue, n, processes, poll, log,
                                        server_pid if backend == "redis" else None)
                    finally:
                        if backend == "postgresql":
                            asyncio.run(_pg_admin(pg_admin, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
                        elif backend == "redis":
                            for key in r.scan_iter(match=f"rq:{{{queue}}}:*", count=1000):
                                r.unlink(key)
                            r.srem("rq:queues", queue)
                    run = msgspec.structs.replace(run, backend=backend, round=rnd, load_1m=load)
                    runs.append(run)
                    waits = ", ".join(f"{k} {v}" for k, v in list(run.wait_events.items())[:4])
                    console.print(
                        f"round {rnd} {backend:<10} processes={processes}: {run.drain_per_s:,.0f}/s over "
                        f"{run.window[0]:,}..{run.window[1]:,} in {run.window_s:.2f} s (wall {run.wall_s:.1f} s, "
                        f"workers' CPU {run.worker_cpu_s:.1f} s, load {load:.1f}); per activity in the window: "
                        f"client {run.client_cpu_us:.1f} us + server {run.server_cpu_us:.1f} us CPU = "
                        f"{run.cores_needed:.2f} cores (the machine: {run.machine_busy:.2f} busy; the server "
                        f"{run.server_share:.2f} of a core); ceiling {run.ceiling_per_s:,.0f}/s"
                        + (f"; waits: {waits}" if waits else "")
                        + ("; store work per activity: " + ", ".join(f"{k} {v:.2f}" for k, v in run.store_work.items())
                           if run.store_work else ""))
    finally:
        r.close()
    table = Table(title=f"drain/s, n={n:,}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    for col in ("backend", "1 process", "2 processes", "ratio 2/1", "CPU us/activity 1 -> 2", "ceiling / 1 process"):
        table.add_column(col, justify="left" if col == "backend" else "right")
    for backend in chosen:
        for rnd in range(1, rounds + 1):
            one, two = (next(x for x in runs if (x.backend, x.round, x.processes) == (backend, rnd, p)) for p in (1, 2))
            cpu = " -> ".join(f"{x.client_cpu_us + (0.0 if math.isnan(x.server_cpu_us) else x.server_cpu_us):.0f}"
                              for x in (one, two))
            table.add_row(f"{backend} (round {rnd})", f"{one.drain_per_s:,.0f}", f"{two.drain_per_s:,.0f}",
                          f"{two.drain_per_s / one.drain_per_s:.2f}", cpu,
                          f"{one.ceiling_per_s / one.drain_per_s:.2f}")
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
