"""Commands that run activities: ``worker MODULE:ENGINE``."""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import sys
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

import runnerq_fast as rq
from runnerq_fast.cli._common import (
    BACKEND_ENV,
    NO_BACKEND,
    BadInput,
    Fail,
    FiniteFloatRange,
    backend_option,
    check_queue_name,
    configure_logging,
    log_level_option,
    run,
)
from runnerq_fast.urls import redact_text


def _where(exc: BaseException) -> str:
    """`` (file, line N)`` of the innermost frame that raised ``exc`` outside this module, or ``""``."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" ({exc.filename}, line {exc.lineno})"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != __file__]
    return f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""


def _describe(exc: BaseException) -> str:
    text = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    return f"{type(exc).__name__}: {text}{_where(exc)}" if text else f"{type(exc).__name__}{_where(exc)}"

if TYPE_CHECKING:
    from runnerq_fast.supervisor import ChildLink


def load_engine(spec: str) -> rq.WorkerEngine:
    """Import ``MODULE:ATTRIBUTE`` and return the :class:`WorkerEngine` it names.

    The current directory is put first on ``sys.path``. ``ATTRIBUTE`` may be a
    dotted path and may name a zero-argument factory returning an engine.

    Raises
    ------
    BadInput
        (exit 2) If ``spec`` is malformed, the module cannot be found or does
        not compile, the attribute is missing, or it is neither an engine nor
        a zero-argument factory returning one.
    Fail
        (exit 1) If the module's code raises while it is imported, or the
        factory raises (``SystemExit`` included); the message names the
        exception and the file and line it came from.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise BadInput(f"expected MODULE:ENGINE (e.g. myapp.tasks:engine), got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except (ImportError, SyntaxError) as exc:
        raise BadInput(f"cannot import module {module_name!r}: {_describe(exc)}") from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the module's own code failed (SystemExit included: it must not exit 0)
        raise Fail(f"importing module {module_name!r} failed: {_describe(exc)}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise BadInput(f"module {module_name!r} has no attribute {attr!r}") from None
    if isinstance(obj, rq.WorkerEngine):
        return obj
    if not callable(obj):
        raise BadInput(f"{spec} is a {type(obj).__name__}, not a runnerq_fast.WorkerEngine")
    try:
        inspect.signature(obj).bind()
    except TypeError:
        raise BadInput(f"{spec} is a {type(obj).__name__} that needs arguments: not a runnerq_fast.WorkerEngine "
                       "nor a zero-argument factory returning one") from None
    except ValueError:
        pass  # no signature to read (some builtins): call it and see
    try:
        made = obj()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        raise Fail(f"calling {spec}() to make the engine failed: {_describe(exc)}") from None
    if not isinstance(made, rq.WorkerEngine):
        raise BadInput(f"{spec}() returned a {type(made).__name__}, not a runnerq_fast.WorkerEngine")
    return made



if TYPE_CHECKING:  # click >= 8.3 makes ParamType generic; older releases are not subscriptable
    _ProcessesParam = click.ParamType[int, Any]
else:
    _ProcessesParam = click.ParamType


class ProcessesType(_ProcessesParam):
    """``--processes``: a whole number of at least 1, or ``auto`` (one per core, ``os.cpu_count()``)."""

    name = "N|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            n = value
        else:
            text = str(value).strip().lower()
            if text == "auto":
                return os.cpu_count() or 1
            try:
                n = int(text)
            except ValueError:
                self.fail(f"{value!r} is not a whole number or 'auto'", param, ctx)
        if n < 1:
            self.fail(f"{value!r} is not at least 1", param, ctx)
        return n


@dataclass(frozen=True)
class WorkerArgs:
    """The per-process options of ``worker``, as given (sent to each supervised child, so picklable)."""

    engine_spec: str
    backend_url: str | None
    concurrency: int | None
    activity_types: str | None
    queue: str | None
    lease_timeout: float | None
    shutdown_grace: float | None
    log_level: str


def prepare_engine(args: WorkerArgs) -> rq.WorkerEngine:
    """Load the engine of ``args.engine_spec`` and apply the command-line overrides (nothing starts).

    Raises
    ------
    BadInput
        If the engine cannot be loaded or an override is refused.
    """
    engine = load_engine(args.engine_spec)
    overrides: dict[str, Any] = {}
    if args.concurrency is not None:
        overrides["max_workers"] = args.concurrency
    if args.queue is not None:
        overrides["queue_name"] = args.queue
    if args.lease_timeout is not None:
        overrides["lease_timeout"] = args.lease_timeout
        if engine.config.heartbeat_interval >= args.lease_timeout:
            overrides["heartbeat_interval"] = 0.0  # back to lease_timeout / 3
    if args.shutdown_grace is not None:
        overrides["shutdown_grace"] = args.shutdown_grace
    if args.activity_types is not None:
        text = args.activity_types.strip()
        overrides["activity_types"] = "*" if text == "*" else [t.strip() for t in text.split(",") if t.strip()]
    try:
        if overrides:
            engine.configure(**overrides)
        if args.backend_url:
            engine.use_backend(args.backend_url)
    except rq.RunnerQError as exc:
        raise BadInput(str(exc)) from None
    return engine


async def serve_engine(engine: rq.WorkerEngine, backend_url: str | None, link: ChildLink | None = None) -> None:
    """Run ``engine`` until SIGTERM/SIGINT (``link``: as a supervised child, until SIGTERM).

    Raises
    ------
    BadInput
        On a configuration error (no backend, a declared type without a handler).
    Fail
        If the engine fails.
    """
    # run_until_stopped() (serve_child() for a supervised child) installs the signal handlers before it
    # starts the engine, so a signal during connect/migrate stops cleanly.
    shown_url = backend_url or os.environ.get(BACKEND_ENV)
    try:
        if link is None:
            await engine.run_until_stopped()
        else:
            from runnerq_fast.supervisor import serve_child

            await serve_child(engine, link)
    except rq.ConfigError as exc:
        if not backend_url and "no backend" in str(exc):
            raise BadInput(NO_BACKEND) from None
        raise BadInput(redact_text(str(exc), shown_url)) from None
    except Exception as exc:
        raise Fail(redact_text(f"worker failed: {type(exc).__name__}: {exc}", shown_url)) from None


def run_supervised_child(args: WorkerArgs, link: ChildLink) -> None:
    """What each child of ``worker --processes N`` runs: the one-process worker, reporting to the supervisor."""
    logging.basicConfig(level=getattr(logging, args.log_level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)-7s [%(process)d] %(name)s: %(message)s")
    try:
        engine = prepare_engine(args)
        run(serve_engine(engine, args.backend_url, link))
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)


@click.command()
@click.argument("engine_spec", metavar="MODULE:ENGINE")
@backend_option
@click.option("--concurrency", "-c", type=click.IntRange(min=1), help="Activities run at once (max_workers).")
@click.option("--activity-types", metavar="A,B", help='Comma-separated types to claim, or "*" for any type.')
@click.option("--queue", help="Queue to serve (default: the engine's).", callback=check_queue_name)
@click.option("--lease-timeout", type=FiniteFloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Lease of a claimed activity, seconds (heartbeat renews it).")
@click.option("--shutdown-grace", type=FiniteFloatRange(min=0), metavar="SECONDS",
              help="Time running activities get to finish on SIGTERM/SIGINT, seconds.")
@log_level_option("info")
@click.option("--processes", "-p", type=ProcessesType(),
              help="Run N worker processes under a supervisor ('auto': one per core). Without it (and without "
                   "--max-*-per-child) the engine runs in this process.")
@click.option("--max-activities-per-child", type=click.IntRange(min=1), metavar="N",
              help="Supervised: recycle a worker process after it finished N activities (its replacement "
                   "starts first).")
@click.option("--max-memory-per-child", type=FiniteFloatRange(min=0, min_open=True), metavar="MB",
              help="Supervised: recycle a worker process whose resident memory reaches MB mebibytes "
                   "(checked every second, Linux /proc).")
@click.option("--restart-backoff", type=FiniteFloatRange(min=0), default=0.5, show_default=True,
              metavar="SECONDS", help="Supervised: first delay before restarting a crashed worker process; "
                                      "doubles per crash within --restart-window.")
@click.option("--restart-backoff-max", type=FiniteFloatRange(min=0), default=30.0, show_default=True,
              metavar="SECONDS", help="Supervised: longest restart delay.")
@click.option("--restart-limit", type=click.IntRange(min=1), default=5, show_default=True, metavar="N",
              help="Supervised: give up (exit 1) when one worker process crashes N times within --restart-window.")
@click.option("--restart-window", type=FiniteFloatRange(min=0, min_open=True), default=60.0, show_default=True,
              metavar="SECONDS", help="Supervised: the sliding window crashes are counted in.")
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), metavar="PORT",
              help="Supervised: serve the Prometheus metrics of all worker processes at http://HOST:PORT/metrics.")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, metavar="HOST",
              help="Supervised: address --metrics-port binds.")
def worker(
    engine_spec: str,
    backend_url: str | None,
    concurrency: int | None,
    activity_types: str | None,
    queue: str | None,
    lease_timeout: float | None,
    shutdown_grace: float | None,
    log_level: str,
    processes: int | None,
    max_activities_per_child: int | None,
    max_memory_per_child: float | None,
    restart_backoff: float,
    restart_backoff_max: float,
    restart_limit: int,
    restart_window: float,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Run the WorkerEngine named MODULE:ENGINE until SIGTERM or SIGINT.

    On a signal the worker stops claiming, lets running activities finish
    within the shutdown grace, puts the rest back to pending and exits 0.

    With --processes N a supervisor starts N worker processes (spawned, each
    loading MODULE:ENGINE), forwards the first SIGTERM/SIGINT to each once
    (a second one kills them), restarts a crashed one with backoff and exits 1
    after a crash loop.
    """
    configure_logging(log_level)
    args = WorkerArgs(engine_spec, backend_url, concurrency, activity_types, queue, lease_timeout, shutdown_grace,
                      log_level)
    engine = prepare_engine(args)  # in the supervisor too: bad input exits 2 before any child starts
    if processes is None and max_activities_per_child is None and max_memory_per_child is None:
        run(serve_engine(engine, backend_url))
        return
    from runnerq_fast.supervisor import Supervisor, SupervisorConfig, rss_bytes  # here: other commands start faster

    url = backend_url or os.environ.get(BACKEND_ENV, "")
    if url.lower().startswith("memory:"):
        raise BadInput("memory:// lives inside one process: worker processes would each serve an empty store of "
                       "their own; use sqlite:///file.db, postgresql:// or redis:// with --processes")
    if max_memory_per_child is not None and rss_bytes(os.getpid()) is None:
        raise BadInput("--max-memory-per-child reads /proc/<pid>/statm, which this system does not have")
    if restart_backoff_max < restart_backoff:
        raise BadInput(f"--restart-backoff-max ({restart_backoff_max:g}) is below --restart-backoff "
                       f"({restart_backoff:g})")
    config = SupervisorConfig(
        processes=processes or 1,
        max_activities=max_activities_per_child,
        max_memory=None if max_memory_per_child is None else round(max_memory_per_child * 2**20),
        restart_backoff=restart_backoff,
        restart_backoff_max=restart_backoff_max,
        restart_limit=restart_limit,
        restart_window=restart_window,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
    )
    try:
        result = Supervisor(run_supervised_child, args, config).run()
    except OSError as exc:
        raise Fail(f"supervisor failed: {exc}") from None
    if result.exit_code == 2:
        raise BadInput(result.reason)
    if result.exit_code:
        raise Fail(result.reason)
