"""Peer comparison: runnerq-fast against the queues its users would otherwise pick, side by side in one run.

::

    .venv-peers/bin/python benchmarks/compare.py -n 20000 --rounds 3     # after pip install -e '.[peers]'

Every system gets the same workload (``benchmarks/peers/_harness.py``): ``n``
no-op jobs enqueued in batches, then drained by ONE worker process, at the
system's default durability. Each run is a subprocess of its own:

* runnerq-fast: ``runnerq-fast bench`` (the project's harness,
  ``runnerq_fast/bench.py``) on memory, SQLite, PostgreSQL and Redis, default
  engine configuration;
* the peers, each in its default configuration and its best documented one
  (``benchmarks/peers/peer_*.py``): PgQueuer and Procrastinate on PostgreSQL;
  arq, SAQ, RQ and Dramatiq on Redis;
* the bare reference loops (``bare_pg.py``, ``bare_redis.py``): a batch claim +
  ack loop with ``SKIP LOCKED`` and a Lua claim + ack loop, the physical limit
  of this design.

Rounds alternate the order of the runs (forward, then backward). Every run
has a fresh PostgreSQL database (created and dropped here) or a database of a
private ``redis-server`` this script starts (flushed after the run: it is
nobody else's), or a fresh SQLite file. The report gives medians over the
rounds and the ratios runnerq-fast / peer and runnerq-fast / bare loop (same
backend), as a terminal table, as JSON and as a PNG bar chart.
"""

from __future__ import annotations

import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import msgspec
from _services import PgDatabases, PrivateRedis
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "benchmarks" / "peers"
RESULTS = ROOT / "benchmarks" / "results"
CHART = ROOT / "benchmarks" / "peers.png"
_celery = ROOT / ".venv-celery" / "bin" / "python"
CELERY_PYTHON = str(_celery) if _celery.exists() else None
CLI = "import sys; from runnerq_fast.cli import main; sys.argv[0] = 'runnerq-fast'; main()"
DEFAULT_PG = os.environ.get("RUNNERQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)


@dataclass(frozen=True)
class Entry:
    """One system in one configuration on one backend."""

    key: str            # e.g. "pgqueuer/best"
    label: str          # as shown in the table and the chart
    backend: str        # "postgresql", "redis", "sqlite", "memory"
    kind: str           # "runnerq", "peer", "bare"
    script: str = ""    # peer module file name (peers and bare loops)
    variant: str = "default"
    n_cap: int | None = None   # at most this many jobs: at its rate n would take minutes (the figure is a rate)
    celery_venv: bool = False  # runs with --celery-python (Celery cannot share the peers' venv)


ENTRIES: tuple[Entry, ...] = (
    Entry("runnerq/postgresql", "runnerq-fast", "postgresql", "runnerq"),
    Entry("pgqueuer/default", "PgQueuer (batch_size 10, default)", "postgresql", "peer", "peer_pgqueuer.py"),
    Entry("pgqueuer/best", "PgQueuer (batch_size 200)", "postgresql", "peer", "peer_pgqueuer.py", "best"),
    Entry("procrastinate/default", "Procrastinate (concurrency 1, default)", "postgresql", "peer",
          "peer_procrastinate.py", n_cap=2000),
    Entry("procrastinate/best", "Procrastinate (concurrency 16)", "postgresql", "peer", "peer_procrastinate.py",
          "best", n_cap=5000),
    Entry("bare/postgresql", "bare SKIP LOCKED claim + ack loop", "postgresql", "bare", "bare_pg.py"),
    Entry("runnerq/redis", "runnerq-fast", "redis", "runnerq"),
    Entry("arq/default", "arq (max_jobs 10, poll 0.5 s, default)", "redis", "peer", "peer_arq.py", n_cap=3000),
    Entry("arq/best", "arq (max_jobs 500, poll_delay 0.05 s)", "redis", "peer", "peer_arq.py", "best"),
    Entry("saq/default", "SAQ (concurrency 10, default)", "redis", "peer", "peer_saq.py"),
    Entry("saq/best", "SAQ (concurrency 50)", "redis", "peer", "peer_saq.py", "best"),
    Entry("rq/default", "RQ (Worker, fork per job, default)", "redis", "peer", "peer_rq.py", n_cap=1000),
    Entry("rq/best", "RQ (SimpleWorker)", "redis", "peer", "peer_rq.py", "best", n_cap=3000),
    Entry("dramatiq/default", "Dramatiq (8 threads, default)", "redis", "peer", "peer_dramatiq.py"),
    Entry("dramatiq/best", "Dramatiq (128 threads)", "redis", "peer", "peer_dramatiq.py", "best"),
    Entry("celery/default", "Celery (prefork, 1 child, default)", "redis", "peer", "peer_celery.py", n_cap=2000,
          celery_venv=True),
    Entry("celery/best", "Celery (solo pool, prefetch 64)", "redis", "peer", "peer_celery.py", "best", n_cap=2000,
          celery_venv=True),
    Entry("bare/redis", "bare Lua claim + ack loop", "redis", "bare", "bare_redis.py"),
    Entry("runnerq/sqlite", "runnerq-fast", "sqlite", "runnerq"),
    Entry("runnerq/memory", "runnerq-fast", "memory", "runnerq"),
)


@dataclass
class Series:
    """Every round's figures of one entry."""

    entry: Entry
    n: int
    drain: list[float] = field(default_factory=list)
    enqueue: list[float] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Row(msgspec.Struct, kw_only=True):
    """One entry of the report (rates in jobs per second, medians over the rounds)."""

    key: str
    label: str
    backend: str
    kind: str
    n: int
    drain_median: float | None
    drain_min: float | None
    drain_max: float | None
    enqueue_median: float | None
    runnerq_over_this_drain: float | None    # runnerq-fast (same backend) / this entry, drain
    runnerq_over_this_enqueue: float | None
    # the bare loop (same backend) / this peer, drain: how far above the peer the design's reference loop
    # itself runs in this run, so a ratio target for runnerq-fast can be read against it
    bare_over_this_drain: float | None = None
    drain: list[float]
    enqueue: list[float]
    errors: list[str]
    runs: list[dict[str, Any]]


class Report(msgspec.Struct, kw_only=True):
    """Everything one comparison measured (``benchmarks/results/compare-*.json``)."""

    started_at: str
    wall_seconds: float
    argv: list[str]
    n: int
    batch_size: int
    rounds: int
    machine: dict[str, Any]
    rows: list[Row]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNERQ_NO_EXTENSIONS"}
    env["PYTHONPATH"] = str(ROOT)
    return env


def run_one(entry: Entry, n: int, batch_size: int, url: str, out: Path, timeout: float,
            celery_python: str | None) -> dict[str, Any]:
    """One run of ``entry`` as a subprocess; its JSON result with ``drain_per_s`` and ``enqueue_per_s``.

    Raises
    ------
    RuntimeError
        If the run fails or takes longer than ``timeout`` seconds.
    """
    if entry.kind == "runnerq":
        cmd = [sys.executable, "-c", CLI, "bench", "--backend", url, "-n", str(n), "--batch-size", str(batch_size),
               "--idle-samples", "0", "--no-progress", "--log-level", "error", "--output-json", str(out)]
    else:
        flag = "--pg-dsn" if entry.backend == "postgresql" else "--redis-url"
        python = celery_python if entry.celery_venv and celery_python else sys.executable
        cmd = [python, str(PEERS / entry.script), "--n", str(n), "--batch-size", str(batch_size),
               "--variant", entry.variant, flag, url, "--timeout", str(timeout), "--output-json", str(out)]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout + 60)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"no result within {timeout + 60:.0f} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-3:]
        raise RuntimeError(f"exit {proc.returncode}: {' | '.join(tail)}")
    doc: dict[str, Any] = msgspec.json.decode(out.read_bytes())
    if entry.kind == "runnerq":
        doc["drain_per_s"] = doc["process_per_s"]
    return doc


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def build_rows(series: Sequence[Series]) -> list[Row]:
    """Medians and runnerq-fast / entry ratios per backend."""
    ours = {s.entry.backend: s for s in series if s.entry.kind == "runnerq"}
    bare = {s.entry.backend: _median(s.drain) for s in series if s.entry.kind == "bare"}
    rows = []
    for s in series:
        mine = ours.get(s.entry.backend)
        d, e = _median(s.drain), _median(s.enqueue)
        rd = _median(mine.drain) if mine else None
        re_ = _median(mine.enqueue) if mine else None
        rows.append(Row(
            key=s.entry.key, label=s.entry.label, backend=s.entry.backend, kind=s.entry.kind, n=s.n,
            drain_median=d, drain_min=min(s.drain, default=None), drain_max=max(s.drain, default=None),
            enqueue_median=e,
            runnerq_over_this_drain=rd / d if rd and d and s.entry.kind != "runnerq" else None,
            runnerq_over_this_enqueue=re_ / e if re_ and e and s.entry.kind != "runnerq" else None,
            bare_over_this_drain=(b / d if (b := bare.get(s.entry.backend)) and d and s.entry.kind == "peer"
                                  else None),
            drain=s.drain, enqueue=s.enqueue, errors=s.errors, runs=s.runs))
    return rows


def print_table(report: Report) -> None:
    """The report as a terminal table."""
    table = Table(title=f"n = {report.n:,} no-op jobs, batches of {report.batch_size}, one worker process, "
                        f"{report.rounds} rounds (medians; ratio = runnerq-fast / this, same backend; "
                        "bare/this = the bare loop / this peer, drain)",
                  title_justify="left")
    for col in ("backend", "system", "n", "drain/s", "min-max", "enqueue/s", "drain ratio", "enqueue ratio",
                "bare/this"):
        table.add_column(col, justify="left" if col in ("backend", "system") else "right")

    def rate(v: float | None) -> str:
        return f"{v:,.0f}" if v is not None else "-"

    def ratio(v: float | None) -> str:
        return f"{v:.2f}x" if v is not None else "-"

    for r in report.rows:
        style = "bold" if r.kind == "runnerq" else "dim" if r.kind == "bare" else ""
        rng = f"{r.drain_min:,.0f}-{r.drain_max:,.0f}" if r.drain_min is not None and r.drain_max is not None else "-"
        label = r.label + (f"  [red]({len(r.errors)} failed: {r.errors[0][:60]})[/]" if r.errors else "")
        table.add_row(r.backend, label, f"{r.n:,}", rate(r.drain_median), rng, rate(r.enqueue_median),
                      ratio(r.runnerq_over_this_drain), ratio(r.runnerq_over_this_enqueue),
                      ratio(r.bare_over_this_drain), style=style)
    console.print(table)


def draw_chart(report: Report, path: Path, command: str) -> None:
    """Horizontal bars of the median drain rate per system (min-max whiskers), grouped by backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report.rows if r.drain_median is not None][::-1]
    colors = {"runnerq": "#1f6feb", "peer": "#8c959f", "bare": "#d29922"}
    fig, ax = plt.subplots(figsize=(10, 0.42 * len(rows) + 1.6), dpi=110)
    ys = range(len(rows))
    med = [r.drain_median or 0.0 for r in rows]
    lo = [m - (r.drain_min or m) for m, r in zip(med, rows, strict=True)]
    hi = [(r.drain_max or m) - m for m, r in zip(med, rows, strict=True)]
    ax.barh(list(ys), med, xerr=[lo, hi], color=[colors[r.kind] for r in rows], capsize=2, height=0.7)
    ax.set_yticks(list(ys), [f"{r.backend}: {r.label}" + (f" (n={r.n:,})" if r.n != report.n else "")
                             for r in rows], fontsize=8)
    for y, (m, r) in enumerate(zip(med, rows, strict=True)):
        ratio = ""
        if r.runnerq_over_this_drain:
            ratio = (f"   runnerq-fast = {r.runnerq_over_this_drain:.2f}x this" if r.kind == "bare"
                     else f"   runnerq-fast {r.runnerq_over_this_drain:.1f}x faster")
        ax.text(m, y, f" {m:,.0f}/s{ratio}", va="center", fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("drain, jobs per second (log scale; median of the rounds, whiskers min-max)")
    rounds = f"{report.rounds} round" + ("s, interleaved" if report.rounds > 1 else "")
    ax.set_title(f"{report.n:,} no-op jobs, one worker process, default durability, {rounds}\n"
                 f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs\n"
                 + "\n".join(textwrap.wrap(command, 100)),
                 fontsize=8)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=colors["runnerq"], label="runnerq-fast"),
                       Patch(color=colors["peer"], label="peer queue"),
                       Patch(color=colors["bare"], label="bare reference loop")], loc="upper right", fontsize=7)
    ax.set_xlim(left=min(m for m in med if m > 0) / 3, right=max(med) * 40)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)



def _exit_cleanly_on_signals() -> None:
    """SIGTERM (and SIGINT, even where the parent ignores it) unwind the stack, so servers and databases go."""

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


@click.command()
@click.option("-n", "n", type=click.IntRange(min=1), default=20_000, show_default=True, help="Jobs per run.")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=500, show_default=True,
              help="Jobs per enqueue call.")
@click.option("--only", help="Comma-separated entry keys or prefixes (e.g. 'runnerq,pgqueuer/best'); default all.")
@click.option("--timeout", type=click.FloatRange(min=1), default=300.0, show_default=True,
              help="Longest one drain may take, seconds.")
@click.option("--pg-admin", default=DEFAULT_PG, show_default=True,
              help="PostgreSQL URL allowed to CREATE DATABASE (env RUNNERQ_TEST_PG).")
@click.option("--output-json", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Default: benchmarks/results/compare-<UTC time>.json.")
@click.option("--png", type=click.Path(dir_okay=False), default=str(CHART), show_default=True,
              help="Where to draw the bar chart ('' for none).")
@click.option("--celery-python", type=click.Path(dir_okay=False, exists=True), default=CELERY_PYTHON,
              help="Interpreter of a venv with the [peers-celery] extra (default: .venv-celery/bin/python if it "
                   "exists; without one the Celery entries are left out).")
def main(n: int, rounds: int, batch_size: int, only: str | None, timeout: float, pg_admin: str,
         output_json: Path | None, png: str, celery_python: str | None) -> None:
    """Run runnerq-fast, the peers and the bare loops interleaved; report medians and ratios."""
    _exit_cleanly_on_signals()
    t_start = time.perf_counter()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    entries = list(ENTRIES)
    if only:
        wanted = [w.strip() for w in only.split(",") if w.strip()]
        entries = [e for e in entries if any(e.key == w or e.key.startswith(w.rstrip("/") + "/") for w in wanted)]
        if not entries:
            raise click.BadParameter(f"no entry matches {only!r}", param_hint="--only")
    if celery_python is None:
        left_out = [e.key for e in entries if e.celery_venv]
        entries = [e for e in entries if not e.celery_venv]
        if left_out:
            console.print(f"[yellow]no --celery-python and no .venv-celery: left out {', '.join(left_out)}[/]")
    series = [Series(e, min(n, e.n_cap) if e.n_cap else n) for e in entries]
    work = Path(tempfile.mkdtemp(prefix="rqcompare-"))
    try:
        with PgDatabases(pg_admin) as pg, PrivateRedis() as redis:
            import redis as redis_py

            for r in range(rounds):
                order = series if r % 2 == 0 else series[::-1]
                for i, s in enumerate(order):
                    e = s.entry
                    db_url = None
                    t0 = time.perf_counter()
                    if e.backend == "postgresql":
                        url = db_url = pg.create(f"r{r}_{i}")
                    elif e.backend == "redis":
                        url = redis.url(1 + i % 60)
                    elif e.backend == "sqlite":
                        url = f"sqlite:///{work / f'r{r}-{i}.db'}"
                    else:
                        url = "memory://"
                    try:
                        doc = run_one(e, s.n, batch_size, url, work / f"r{r}-{i}.json", timeout, celery_python)
                        s.drain.append(float(doc["drain_per_s"]))
                        s.enqueue.append(float(doc["enqueue_per_s"]))
                        s.runs.append(doc)
                        what = f"drain {doc['drain_per_s']:>10,.0f}/s  enqueue {doc['enqueue_per_s']:>10,.0f}/s"
                    except RuntimeError as exc:
                        s.errors.append(str(exc))
                        what = f"[red]failed: {exc}[/]"
                    finally:
                        if db_url is not None:
                            pg.drop(db_url)
                        elif e.backend == "redis":
                            redis_py.Redis.from_url(url).flushdb()   # our private server only
                        for p in work.glob(f"r{r}-{i}.db*"):
                            p.unlink()
                    console.print(f"round {r + 1}/{rounds} {e.backend:<10} {e.label:<40} n={s.n:<6,} {what}"
                                  f"  ({time.perf_counter() - t0:.1f} s)")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    report = Report(started_at=started_at, wall_seconds=round(time.perf_counter() - t_start, 1), argv=sys.argv,
                    n=n, batch_size=batch_size, rounds=rounds,
                    machine={"python": platform.python_version(), "platform": platform.platform(),
                             "cpu_count": os.cpu_count() or 0,
                             "load_average_end": list(os.getloadavg())},
                    rows=build_rows(series))
    print_table(report)
    out = output_json or RESULTS / f"compare-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n")
    console.print(f"wrote {out}")
    if png:  # a str: Path("") is "." and drew into a file named ".png"
        command = "benchmarks/compare.py " + " ".join(sys.argv[1:])
        draw_chart(report, Path(png), command.strip())
        console.print(f"wrote {png}")


if __name__ == "__main__":
    main()
