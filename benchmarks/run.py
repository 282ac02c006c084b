"""Run :func:`runnerq_fast.bench.run_bench` on each backend URL and write the figures as JSON.

::

    .venv/bin/python benchmarks/run.py memory:// postgresql://postgres@127.0.0.1:5432/test \\
        -n 20000 --repeat 3 --output-json benchmarks/results/latest.json

Each run uses a fresh ``bench-<random>`` queue on the given backend (nothing
is deleted), ONE worker engine in this process with the default configuration
(apart from ``--concurrency``) on uvloop (``RUNNERQ_LOOP=asyncio`` for the stock
loop, ``RUNNERQ_NO_EXTENSIONS=1`` for the pure-Python hot paths). The JSON
holds every run's :class:`~runnerq_fast.bench.BenchResult` (figures,
configuration, machine) and, per backend, the best drain rate. Peer
comparisons (PgQueuer, arq, ...) are a separate harness.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import click
import msgspec
from rich.console import Console
from rich.table import Table

from runnerq_fast.bench import BenchConfig, BenchResult, run_bench
from runnerq_fast.engine import run_with_uvloop
from runnerq_fast.urls import redact_url


class Report(msgspec.Struct, kw_only=True, frozen=True):
    """Everything one harness invocation measured.

    Attributes
    ----------
    generated_at : str
        UTC time the report was written, ISO 8601.
    argv : list of str
        The command line.
    runs : list of BenchResult
        Every run, in order.
    best_process_per_s : dict of str to float
        Per redacted backend URL, the highest drain rate of its runs (activities/s).
    """

    generated_at: str
    argv: list[str]
    runs: list[BenchResult]
    best_process_per_s: dict[str, float]


def measure(config: BenchConfig) -> BenchResult:
    """Run one benchmark on a fresh event loop and return its result."""
    box: list[BenchResult] = []

    async def main() -> None:
        box.append(await run_bench(config))

    run_with_uvloop(main())
    return box[0]


@click.command()
@click.argument("backend_urls", nargs=-1, required=True, metavar="URL...")
@click.option("-n", "n", type=click.IntRange(min=1), default=20_000, show_default=True, help="Activities per run.")
@click.option("--batch-size", type=click.IntRange(min=1), default=500, show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), help="Engine max_workers (default: engine default).")
@click.option("--idle-samples", type=click.IntRange(min=0), default=200, show_default=True)
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True, help="Runs per backend.")
@click.option("--output-json", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Where to write the report (default: stdout).")
def main(
    backend_urls: tuple[str, ...],
    n: int,
    batch_size: int,
    concurrency: int | None,
    idle_samples: int,
    repeat: int,
    output_json: Path | None,
) -> None:
    """Benchmark each backend URL in turn and write one JSON report."""
    console = Console(stderr=True)
    runs: list[BenchResult] = []
    for url in backend_urls:
        for i in range(repeat):
            console.print(f"[bold]{redact_url(url)}[/bold] run {i + 1}/{repeat}: n={n:,}")
            config = BenchConfig(backend_url=url, n=n, batch_size=batch_size, concurrency=concurrency,
                                 idle_samples=idle_samples)
            runs.append(measure(config))
    best: dict[str, float] = {}
    for r in runs:
        best[r.backend_url] = max(best.get(r.backend_url, 0.0), r.process_per_s)

    table = Table(title=f"runnerq-fast, n={n:,}, batch={batch_size}")
    for col in ("backend", "enqueue/s", "drain/s", "idle p50 ms", "idle p99 ms", "backlog p50 ms"):
        table.add_column(col, justify="left" if col == "backend" else "right")
    for r in runs:
        table.add_row(r.backend, f"{r.enqueue_per_s:,.0f}", f"{r.process_per_s:,.0f}",
                      f"{r.idle_latency.p50_ms:.2f}", f"{r.idle_latency.p99_ms:.2f}",
                      f"{r.backlog_latency.p50_ms:,.0f}")
    console.print(table)

    report = Report(generated_at=datetime.now(UTC).isoformat(timespec="seconds"), argv=sys.argv,
                    runs=runs, best_process_per_s=best)
    data = msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n"
    if output_json is None:
        sys.stdout.buffer.write(data)
    else:
        output_json.parent.mkdir(parents=True, exist_ok=True)
        output_json.write_bytes(data)
        console.print(f"wrote {output_json}")


if __name__ == "__main__":
    main()
