"""``runnerq-fast loadtest``: the locust load-test harness (:mod:`runnerq_fast.loadtest.runner`) from the CLI.

Needs the ``loadtest`` extra (locust, matplotlib, psutil) and the
locustfile, ``loadtest/locustfile.py`` of the repository: the one in the
working directory, else the one beside the package of an editable install,
else ``--locustfile``. ``loadtest/run.py`` runs this same command.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from urllib.parse import urlsplit

import click

import runnerq_fast as rq
from runnerq_fast.cli._common import BadInput, Fail, FiniteFloatRange, out, run
from runnerq_fast.urls import redact_text

__all__ = ["DEFAULT_URL", "loadtest"]

DEFAULT_URL = "sqlite:///runnerq-loadtest.db"
"""The embedded default: a SQLite file in the working directory (a fresh queue per run)."""

_EXTRA = "pip install 'runnerq-fast[loadtest]'"


def _locustfile(given: Path | None) -> Path:
    if given is not None:
        if not given.is_file():
            raise BadInput(f"--locustfile {given}: no such file")
        return given
    for candidate in (Path.cwd() / "loadtest" / "locustfile.py",
                      Path(__file__).resolve().parents[2] / "loadtest" / "locustfile.py"):
        if candidate.is_file():
            return candidate
    raise BadInput("no loadtest/locustfile.py in the working directory: run from the repository root "
                   "or pass --locustfile PATH")


@click.command()
@click.option("--backend", "backend_url", default=DEFAULT_URL, show_default=True, metavar="URL",
              help="Backend URL (sqlite:///, postgresql://, redis://, redis+cluster://; not memory://: the "
                   "processes need one store). "
                   "RUNNERQ_BACKEND is not read: load goes to your configured backend only when asked.")
@click.option("--duration", "-t", type=FiniteFloatRange(min=1), default=30.0, show_default=True, metavar="SECONDS",
              help="Seconds of load.")
@click.option("--users", "-u", type=click.IntRange(min=1), default=20, show_default=True, help="locust users.")
@click.option("--rate", type=FiniteFloatRange(min=0), default=1000.0, show_default=True, metavar="REQ/S",
              help="Requests per second over all users (each user: rate / users; a batch is one request); 0: no wait.")
@click.option("--workers", "-w", type=click.IntRange(min=1), default=2, show_default=True,
              help="Worker processes (runnerq-fast worker --processes).")
@click.option("--concurrency", "-c", type=click.IntRange(min=1), default=64, show_default=True,
              help="Activities run at once per worker process.")
@click.option("--http-weight", type=click.IntRange(min=0), default=3, show_default=True,
              help="Weight of the HTTP users (FastHttpUser against serve).")
@click.option("--api-weight", type=click.IntRange(min=0), default=1, show_default=True,
              help="Weight of the Python-API users.")
@click.option("--shape", type=click.Choice(["", "step", "spike"]), default="", show_default=True,
              help="A LoadTestShape: step (a fifth of the users more every fifth of the time) or spike.")
@click.option("--locust-processes", type=click.IntRange(min=1), default=1, show_default=True,
              help="locust processes (locust --processes).")
@click.option("--drain-timeout", type=FiniteFloatRange(min=0), default=120.0, show_default=True, metavar="SECONDS",
              help="Longest wait for the queue to drain after the load.")
@click.option("--max-error-rate", type=FiniteFloatRange(0, 1), default=0.01, show_default=True,
              help="Threshold: failed requests / requests.")
@click.option("--max-p99-ms", type=FiniteFloatRange(min=0), default=1000.0, show_default=True,
              help="Threshold: enqueue→start p99 in milliseconds.")
@click.option("--max-lost", type=click.IntRange(min=0), default=0, show_default=True,
              help="Threshold: accepted activities never completed.")
@click.option("--max-duplicate-runs", type=click.IntRange(min=0), default=0, show_default=True,
              help="Threshold: attempts run twice.")
@click.option("--output", "-o", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Output directory (default: ./loadtest-results/<UTC time>).")
@click.option("--locustfile", type=click.Path(dir_okay=False, path_type=Path), metavar="PATH",
              help="The locustfile (default: loadtest/locustfile.py).")
def loadtest(backend_url: str, duration: float, users: int, rate: float, workers: int, concurrency: int,
             http_weight: int, api_weight: int, shape: str, locust_processes: int, drain_timeout: float,
             max_error_rate: float, max_p99_ms: float, max_lost: int, max_duplicate_runs: int,
             output: Path | None, locustfile: Path | None) -> None:
    """Load-test serve + N workers with locust; report latency, lost and duplicate runs; exit 1 on a threshold.

    Starts `runnerq-fast serve` and `runnerq-fast worker --processes N` running the
    load app, runs locust headless (HTTP and Python-API users) for --duration at
    --rate, waits for the queue to drain, then writes locust's CSV and HTML report,
    summary.json and chart.png into --output and prints a table.
    """
    from runnerq_fast.loadtest.runner import LoadTestOptions, run_loadtest
    from runnerq_fast.loadtest.summary import Thresholds

    missing = [m for m in ("locust", "psutil") if importlib.util.find_spec(m) is None]
    if missing:
        raise BadInput(f"loadtest needs {', '.join(missing)}: {_EXTRA}")
    try:
        scheme = urlsplit(backend_url).scheme.lower()
    except ValueError as exc:
        raise BadInput(f"malformed backend URL: {exc}") from None
    if scheme not in ("sqlite", "postgresql", "postgres", "redis", "rediss", "redis+cluster", "rediss+cluster"):
        raise BadInput(redact_text(f"loadtest needs a store shared by processes (sqlite:///, postgresql://, "
                                   f"redis://, redis+cluster://), not {backend_url}", backend_url))
    if shape and locust_processes > 1:  # locust's master ran a shape with no users at all in a 10 s trial
        raise BadInput("--shape runs in one locust process: drop --locust-processes")
    if http_weight + api_weight == 0:
        raise BadInput("--http-weight and --api-weight are both 0: no users")
    output = output or Path("loadtest-results") / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    if (output / "records").is_dir() and any((output / "records").iterdir()):
        raise BadInput(f"--output {output} already holds a run (its records/ would mix with this one's): "
                       "choose another directory")
    opts = LoadTestOptions(
        backend=backend_url, locustfile=_locustfile(locustfile),
        output=output,
        duration=duration, users=users, rate=rate, workers=workers, concurrency=concurrency,
        api_weight=api_weight, http_weight=http_weight, shape=shape, locust_processes=locust_processes,
        drain_timeout=drain_timeout,
        thresholds=Thresholds(max_error_rate=max_error_rate, max_p99_ms=max_p99_ms, max_lost=max_lost,
                              max_duplicate_runs=max_duplicate_runs),
    )
    try:
        code = run(run_loadtest(opts, out))
    except rq.ConfigError as exc:
        raise BadInput(redact_text(str(exc), backend_url)) from None
    except (click.ClickException, KeyboardInterrupt):
        raise
    except Exception as exc:  # a process that did not start, a store that cannot be reached
        raise Fail(redact_text(f"load test failed: {type(exc).__name__}: {exc}", backend_url)) from None
    raise SystemExit(code)
