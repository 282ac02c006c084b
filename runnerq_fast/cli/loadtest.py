"""``runnerq-fast loadtest``: the locust load-test harness (:mod:`runnerq_fast.loadtest.runner`) from the CLI.

Needs the ``loadtest`` extra (locust, matplotlib, psutil) and the
locustfile, ``loadtest/locustfile.py`` of the repository: the one in the
working directory, else the one beside the package of an editable install,
else ``--locustfile``. ``loadtest/run.py`` runs this same command.
"""

from __future__ import annotations

import importlib.util
import math
import time
from pathlib import Path
from urllib.parse import urlsplit

import click

import runnerq_fast as rq
from runnerq_fast.cli._common import BadInput, Fail, FiniteFloatRange, out, run
from runnerq_fast.urls import redact_text

__all__ = ["DEFAULT_URL", "RATE_PER_CORE", "USER_RATE", "loadtest"]

DEFAULT_URL = "sqlite:///runnerq-loadtest.db"
"""The embedded default: a SQLite file in the working directory (a fresh queue per run)."""

USER_RATE = 5.0
"""The default ``--users`` give each user at most this many requests/s: 200 ms for each answer."""

RATE_PER_CORE = 50.0
"""The default ``--rate``, requests/s per CPU core (about 165 activities/s: a batch is one request).

serve, the workers, the store and locust share the machine's cores; on
two cores 100 requests/s keep a quiet machine about half busy, so the
default run measures the queue with room to spare. The highest rate is
what ``--capacity`` finds.
"""

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
@click.option("--users", "-u", type=click.IntRange(min=1), default=None,
              help=f"locust users. Default: one per {USER_RATE:g} req/s of --rate, at least 20 (each waits for its "
                   "answer before sending again). With --capacity: the users each step adds.")
@click.option("--rate", type=FiniteFloatRange(min=0), default=None, metavar="REQ/S",
              help="Requests per second over all users (each user: rate / users; a batch is one request); 0: no "
                   f"wait. Default: {RATE_PER_CORE:g} per CPU core. With --capacity: the first step's rate and "
                   "each step's increase.")
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
@click.option("--min-sent-share", type=FiniteFloatRange(0, 1), default=0.9, show_default=True,
              help="Requests/s locust must send, as a share of --rate; below it the run is INCONCLUSIVE (exit 3) "
                   "unless it failed (see docs/operating/load-testing.md), and a capacity step breaks.")
@click.option("--capacity", is_flag=True,
              help="Capacity mode: --users more users and --rate more requests/s every --step-seconds, until a "
                   "step breaks a limit (p99, error rate, sent rate); reports the highest rate sustained.")
@click.option("--step-seconds", type=FiniteFloatRange(min=2), default=10.0, show_default=True, metavar="SECONDS",
              help="With --capacity: seconds of one step.")
@click.option("--max-steps", type=click.IntRange(min=1), default=20, show_default=True,
              help="With --capacity: steps at most.")
@click.option("--output", "-o", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Output directory (default: ./loadtest-results/<UTC time>).")
@click.option("--locustfile", type=click.Path(dir_okay=False, path_type=Path), metavar="PATH",
              help="The locustfile (default: loadtest/locustfile.py).")
def loadtest(backend_url: str, duration: float, users: int | None, rate: float | None, workers: int, concurrency: int,
             http_weight: int, api_weight: int, shape: str, locust_processes: int, drain_timeout: float,
             max_error_rate: float, max_p99_ms: float, max_lost: int, max_duplicate_runs: int,
             min_sent_share: float, capacity: bool, step_seconds: float, max_steps: int,
             output: Path | None, locustfile: Path | None) -> None:
    """Load-test serve + N workers with locust; report latency, lost and duplicate runs, and a verdict.

    Starts `runnerq-fast serve` and `runnerq-fast worker --processes N` running the
    load app, runs locust headless (HTTP and Python-API users) for --duration at
    --rate, waits for the queue to drain, then writes locust's CSV and HTML report,
    summary.json and chart.png into --output and prints a table and a one-line
    verdict. Exit 0 PASSED, 1 FAILED (a threshold), 3 INCONCLUSIVE (locust sent
    less than --min-sent-share of --rate: the rate asked was not tested), 2 bad input.
    With --capacity: the rate rises step by step until a step breaks a limit, and
    the highest rate that held is reported.
    """
    from runnerq_fast.loadtest.runner import LoadTestOptions, cores, run_loadtest
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
    if capacity and shape:
        raise BadInput("--capacity runs a step shape of its own: drop --shape")
    if capacity and locust_processes > 1:
        raise BadInput("--capacity runs in one locust process: drop --locust-processes")
    if capacity and rate == 0:
        raise BadInput("--capacity needs a --rate per step (not 0)")
    if rate is None:
        rate = RATE_PER_CORE * cores()
    if users is None:
        users = max(20, math.ceil(rate / USER_RATE))
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
                              max_duplicate_runs=max_duplicate_runs, min_sent_share=min_sent_share),
        capacity=capacity, step_seconds=step_seconds, max_steps=max_steps,
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
