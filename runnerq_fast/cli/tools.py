"""Tools around the engine: ``bench`` (throughput and latency), ``demo`` (the mixed workload on the
embedded default), ``demo-shop`` (the shop example)."""

from __future__ import annotations

import asyncio
import importlib
import os
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import click
import msgspec
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

import runnerq_fast as rq
from runnerq_fast import demo as rq_demo
from runnerq_fast.bench import BenchConfig, BenchResult, result_to_json, run_bench
from runnerq_fast.cli._common import (
    BACKEND_ENV,
    BadInput,
    Fail,
    FiniteFloatRange,
    backend_option,
    check_queue_name,
    configure_logging,
    err,
    log_level_option,
    out,
    require_backend,
    run,
)
from runnerq_fast.urls import redact_text, redact_url


@click.command()
@backend_option
@click.option("-n", "n", type=click.IntRange(min=1), default=20_000, show_default=True,
              help="Activities to enqueue and drain.")
@click.option("--batch-size", type=click.IntRange(min=1), default=500, show_default=True,
              help="Activities per enqueue_many call.")
@click.option("--concurrency", "-c", type=click.IntRange(min=1), help="Engine max_workers (default: engine default).")
@click.option("--queue", callback=check_queue_name, help="Queue name (default: a fresh bench-<random> queue).")
@click.option("--idle-samples", type=click.IntRange(min=0), default=200, show_default=True,
              help="Single enqueues on an idle engine for the idle latency (0 skips).")
@click.option("--typed-samples", type=click.IntRange(min=0), default=100, show_default=True,
              help="Single enqueues with two type-disjoint engines on the queue, for either in turn (0 skips).")
@click.option("--due-samples", type=click.IntRange(min=0), default=40, show_default=True,
              help="Delayed activities (30-150 ms) timed from their due time to their start (0 skips).")
@click.option("--output-json", type=click.Path(dir_okay=False, writable=True, path_type=Path), metavar="FILE",
              help="Write every figure, the configuration and the machine as JSON.")
@click.option("--no-progress", is_flag=True, help="Do not draw progress bars.")
@log_level_option("warning")
def bench(
    backend_url: str | None,
    n: int,
    batch_size: int,
    concurrency: int | None,
    queue: str | None,
    idle_samples: int,
    typed_samples: int,
    due_samples: int,
    output_json: Path | None,
    no_progress: bool,
    log_level: str,
) -> None:
    """Measure enqueue/s, drain/s and enqueue-to-start latency of one engine.

    Enqueues N no-op activities on a fresh queue in batches, drains them with
    one WorkerEngine, then measures the latency of single activities on the
    idle engine, of single activities with a second engine of another type
    on the queue, and of delayed activities from their due time. Nothing is
    deleted.
    """
    configure_logging(log_level)
    url = require_backend(backend_url)
    if output_json is not None and not output_json.parent.is_dir():
        # checked now, not after a run of minutes whose figures would then be lost
        raise BadInput(f"--output-json: directory {str(output_json.parent)!r} does not exist")
    try:
        config = BenchConfig(backend_url=url, n=n, batch_size=batch_size, concurrency=concurrency,
                             queue_name=queue, idle_samples=idle_samples, typed_samples=typed_samples,
                             due_samples=due_samples)
    except rq.ConfigError as exc:
        raise BadInput(str(exc)) from None

    progress = Progress(
        TextColumn("{task.description:<8}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, disable=no_progress or not err.is_terminal, transient=True,
    )
    tasks: dict[str, Any] = {}

    def report(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = progress.add_task(phase, total=total)
        progress.update(tasks[phase], completed=done)

    async def go() -> BenchResult:
        try:
            return await run_bench(config, report)
        except rq.ConfigError as exc:
            raise BadInput(redact_text(str(exc), url)) from None
        except (click.ClickException, asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise Fail(redact_text(f"benchmark failed: {type(exc).__name__}: {exc}", url)) from None

    with progress:
        result = run(go())
    out.print(_bench_table(result))
    if output_json is not None:
        try:
            output_json.write_bytes(result_to_json(result))
        except OSError as exc:
            raise Fail(f"could not write {str(output_json)!r}: {exc.strerror or exc}") from None
        err.print(f"wrote {output_json}")


@click.command()
@click.option("--backend", "backend_url", metavar="URL",
              help=f"Backend URL (default: {rq_demo.DEFAULT_URL}, a SQLite file in the working directory). "
                   f"{BACKEND_ENV} is not read: the demo never writes to your configured backend unless asked.")
@click.option("-n", "n", type=click.IntRange(min=rq_demo.MIN_N, max=rq_demo.MAX_N),
              default=rq_demo.DEFAULT_N, show_default=True,
              help="Activities in all (chained children included).")
@click.option("--concurrency", "-c", type=click.IntRange(min=1), default=128, show_default=True,
              help="Engine max_workers.")
@click.option("--timeout", type=FiniteFloatRange(min=0, min_open=True), default=120.0, show_default=True,
              metavar="SECONDS", help="Longest the run may take.")
@click.option("--no-progress", is_flag=True, help="Do not draw the progress bar.")
@log_level_option("critical")
def demo(backend_url: str | None, n: int, concurrency: int, timeout: float, no_progress: bool,
         log_level: str) -> None:
    """Run a realistic mixed workload end to end, durably, and summarise it.

    With no --backend it needs no service: everything goes to the SQLite file
    ./runnerq-demo.db (created if missing). Each run uses a fresh queue in that
    file, so earlier runs stay inspectable. Six activity types with different
    payload sizes and priorities, a few delayed ones, chains of child
    activities, about 5 % that fail once and succeed on retry, and one poison
    activity that ends in dead letter.
    """
    configure_logging(log_level)
    url = backend_url or rq_demo.DEFAULT_URL
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, disable=no_progress or not err.is_terminal, transient=False,
    )
    task = progress.add_task("activities finished", total=n)

    def report(done: int, total: int) -> None:
        progress.update(task, completed=done, total=total)

    async def go() -> rq_demo.DemoReport:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_sigint() -> None:
            if stop.is_set():  # a second Ctrl-C: quit at once (the default handler raises KeyboardInterrupt)
                loop.remove_signal_handler(signal.SIGINT)
                os.kill(os.getpid(), signal.SIGINT)
                return
            stop.set()
            progress.console.print("stopping the demo (Ctrl-C again quits at once) ...")

        loop.add_signal_handler(signal.SIGINT, on_sigint)
        try:
            return await rq_demo.run_demo(url, n, concurrency=concurrency, timeout=timeout, progress=report,
                                          stop=stop)
        except rq.ConfigError as exc:
            raise BadInput(str(exc)) from None
        except (click.ClickException, asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise Fail(redact_text(f"demo failed on {url}: {type(exc).__name__}: {exc}", url)) from None
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    err.print(f"runnerq-fast demo: {n:,} activities on {redact_url(url)}")
    with progress:
        result = run(go())
    if result.interrupted:
        _interrupted(result, url)
    out.print(_demo_table(result))
    # never echo a password: the commands name the URL with it replaced by ***
    cli_url = shlex.quote(f"sqlite:///{result.location}" if result.backend_name == "sqlite" else redact_url(url))
    if result.reused_file is None:
        where = "every run gets a fresh queue; earlier runs stay in the same store"
    elif result.reused_file:
        where = "existing file reused: this run's activities are on a fresh queue, earlier runs' queues are kept"
    else:
        where = "new file"
    if result.backend_name == "memory":
        # an in-process store: another `runnerq-fast` process would see an empty one
        out.print(Text.assemble(f"data: {result.location}  queue ", (result.queue, "bold"),
                                "  (in-process store: gone when this process ends; use --backend "
                                "sqlite:///FILE or postgresql://... to keep it)"))
    else:
        out.print(Text.assemble(f"data: {result.location}  queue ", (result.queue, "bold"), f"  ({where})"))
        prog = _program()
        hidden = "  (password shown as ***: put yours back)" if redact_url(url) != url else ""
        out.print(f"look at what is stored:{hidden}")
        out.print(f"  {prog} stats --backend {cli_url} --queue {result.queue}")
        if result.dead_letter_id:
            out.print(f"  {prog} inspect {result.dead_letter_id} --backend {cli_url}    # the dead-lettered one")
        if result.retried_id:
            out.print(f"  {prog} inspect {result.retried_id} --backend {cli_url}"
                      "    # failed once, then succeeded")
        if result.chain_ids:
            out.print(f"  {prog} inspect {result.chain_ids[-1]} --backend {cli_url}    # last step of a chain")
    if result.timed_out:
        raise Fail(f"the demo did not finish within {timeout:g} s")
    if not result.succeeded:
        raise Fail("the demo ended with unexpected counts (see the table)")


def _interrupted(r: rq_demo.DemoReport, url: str) -> None:
    """Say what an interrupted run left in the store and how to finish or drop it; exit 130 (Ctrl-C)."""
    s = r.stats
    left = ", ".join(f"{name} {n:,}" for name, n in (("pending", s.pending), ("scheduled", s.scheduled),
                                                     ("retrying", s.retrying), ("processing", s.processing)) if n)
    never = r.total - s.total  # planned, never enqueued (a chain's later steps included)
    if s.total == 0:
        err.print(f"interrupted before the first enqueue: nothing was stored (queue {r.queue!r} is empty)")
        raise SystemExit(130)
    err.print(f"interrupted after {r.seconds:.1f} s: {s.total - r.unfinished:,} of {r.total:,} activities "
              f"finished" + (f", {never:,} never enqueued" if never > 0 else ""))
    if r.backend_name == "memory":
        err.print("nothing is left: the memory store ends with this process")
    elif r.unfinished == 0:
        err.print(f"nothing unfinished is left in queue {r.queue!r} ({r.location})")
    else:
        prog = _program()
        cli_url = shlex.quote(f"sqlite:///{r.location}" if r.backend_name == "sqlite" else redact_url(url))
        hidden = "  (password shown as ***: put yours back)" if redact_url(url) != url else ""
        err.print(f"queue {r.queue!r} in {r.location} keeps {r.unfinished:,} unfinished activities ({left});"
                  f" no worker serves it now.{hidden}")
        err.print(f"  finish them: {prog} worker runnerq_fast.demo:engine --backend {cli_url} --queue {r.queue}")
        err.print(f"  or drop them: {prog} cancel --all --queue {r.queue} --backend {cli_url}"
                  f" && {prog} delete --all --queue {r.queue} --backend {cli_url}")
    raise SystemExit(130)


def _program() -> str:
    """How to call this CLI again in a printed command line.

    ``runnerq-fast`` when that name finds this very script on ``PATH``; else
    the script's absolute path (the README runs ``.venv/bin/runnerq-fast``
    without activating the venv, where a bare ``runnerq-fast`` is not found).
    """
    script = sys.argv[0]
    if os.path.basename(script) == "runnerq-fast" and os.path.isfile(script):
        found = shutil.which("runnerq-fast")
        if found is None or os.path.realpath(found) != os.path.realpath(script):
            return shlex.quote(os.path.abspath(script))
    return "runnerq-fast"


def _demo_table(r: rq_demo.DemoReport) -> Table:
    table = Table(title=f"runnerq-fast demo: {r.total:,} activities on {r.backend_name}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for status, count in msgspec.structs.asdict(r.stats).items():
        if count:
            table.add_row(f"  {status}", f"{count:,}")
    table.add_row("wall time (all, incl. delayed)", f"{r.seconds:.2f} s")
    table.add_row("throughput (undelayed, enqueue→done)", f"{r.throughput:,.0f} activities/s")
    table.add_row("enqueue→start p50 / p99 (incl. backlog)", f"{r.start_p50_ms:,.1f} / {r.start_p99_ms:,.1f} ms")
    table.add_row("end-to-end p50 / p99", f"{r.e2e_p50_ms:,.1f} / {r.e2e_p99_ms:,.1f} ms")
    table.add_row("retries (attempts after a failure)", f"{r.retries:,}")
    table.add_row("dead letters", f"{r.stats.dead_letter:,}")
    return table


@click.command("demo-shop")
@click.option("--backend", "backend_url", envvar=BACKEND_ENV, show_envvar=True, default="memory://",
              show_default=True, metavar="URL", help="Backend URL (default: the in-process memory store).")
@click.option("--orders", type=click.IntRange(min=1), default=3, show_default=True, help="Orders to place.")
@click.option("--timeout", type=FiniteFloatRange(min=0, min_open=True), default=60.0, show_default=True,
              metavar="SECONDS", help="Longest the whole run may take.")
@log_level_option("warning")
def demo_shop(backend_url: str, orders: int, timeout: float, log_level: str) -> None:
    """Run the examples/shop order pipeline end to end in this process.

    Starts the shop engine, places --orders orders (8 chained activities each,
    with retries and a delayed step) and prints the final counts. Run it from
    the repository root, where the examples/ package lives.
    """
    configure_logging(log_level)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        demo: Any = importlib.import_module("examples.shop.demo")
    except ImportError as exc:
        raise BadInput(f"demo-shop needs the repository's examples/ package; run it from the repository root "
                        f"({exc})") from None
    started = time.perf_counter()
    try:
        stats = run(demo.run_demo(backend_url, orders, timeout))
    except rq.ConfigError as exc:
        raise BadInput(str(exc)) from None
    except Exception as exc:
        raise Fail(f"demo failed: {type(exc).__name__}: {exc}") from None
    out.print(demo.summary_table(stats, orders, time.perf_counter() - started))
    if not demo.succeeded(stats, orders):
        raise Fail("not every activity completed")


def _bench_table(r: BenchResult) -> Table:
    table = Table(title=f"runnerq-fast bench: {r.backend} ({r.backend_url}), loop={r.loop}, "
                        f"speedups={'on' if r.speedups_enabled else 'off'}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [
        ("activities (n)", f"{r.n:,}"),
        ("enqueue batch size", f"{r.batch_size:,}"),
        ("engine concurrency", f"{r.concurrency:,}"),
        ("enqueue", f"{r.enqueue_per_s:,.0f} /s  ({r.enqueue_seconds:.3f} s)"),
        ("drain (process)", f"{r.process_per_s:,.0f} /s  ({r.process_seconds:.3f} s)"),
        ("completed (backend)", f"{r.completed:,}"),
        ("backlog enqueue→start p50 / p99 (incl. queueing)",
         f"{r.backlog_latency.p50_ms:,.1f} / {r.backlog_latency.p99_ms:,.1f} ms"),
        (f"idle enqueue→start p50 / p99 ({r.idle_latency.samples} samples)",
         f"{r.idle_latency.p50_ms:.3f} / {r.idle_latency.p99_ms:.3f} ms"),
    ]
    if r.typed_idle_latency.samples or r.typed_idle_latency.missed:
        rows.append((f"idle enqueue→start, two type-disjoint engines, p50 / p99 ({r.typed_idle_latency.samples} "
                     "samples)", f"{r.typed_idle_latency.p50_ms:.3f} / {r.typed_idle_latency.p99_ms:.3f} ms"))
    if r.due_latency.samples or r.due_latency.missed:
        rows.append((f"delayed activity due→start p50 / p99 ({r.due_latency.samples} samples)",
                     f"{r.due_latency.p50_ms:.3f} / {r.due_latency.p99_ms:.3f} ms"))
    missed = r.idle_latency.missed + r.typed_idle_latency.missed + r.due_latency.missed
    if missed:
        rows.append(("probes that never started", str(missed)))
    for name, value in rows:
        table.add_row(name, value)
    return table
