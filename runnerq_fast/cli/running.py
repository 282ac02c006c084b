"""Commands that run activities: ``worker MODULE:ENGINE``."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

import runnerq_fast as rq
from runnerq_fast.cli._common import (
    NO_BACKEND,
    BadInput,
    Fail,
    backend_option,
    configure_logging,
    log_level_option,
    run,
)


def load_engine(spec: str) -> rq.WorkerEngine:
    """Import ``MODULE:ATTRIBUTE`` and return the :class:`WorkerEngine` it names.

    The current directory is put first on ``sys.path``. ``ATTRIBUTE`` may be a
    dotted path and may name a zero-argument factory returning an engine.

    Raises
    ------
    click.ClickException
        If the module cannot be imported or the attribute is not an engine.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise BadInput(f"expected MODULE:ENGINE (e.g. myapp.tasks:engine), got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise BadInput(f"cannot import module {module_name!r}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise BadInput(f"module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(obj, rq.WorkerEngine) and callable(obj):
        obj = obj()
    if not isinstance(obj, rq.WorkerEngine):
        raise BadInput(f"{spec} is a {type(obj).__name__}, not a runnerq_fast.WorkerEngine")
    return obj



@click.command()
@click.argument("engine_spec", metavar="MODULE:ENGINE")
@backend_option
@click.option("--concurrency", "-c", type=click.IntRange(min=1), help="Activities run at once (max_workers).")
@click.option("--activity-types", metavar="A,B", help='Comma-separated types to claim, or "*" for any type.')
@click.option("--queue", help="Queue to serve (default: the engine's).")
@click.option("--lease-timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Lease of a claimed activity, seconds (heartbeat renews it).")
@click.option("--shutdown-grace", type=click.FloatRange(min=0), metavar="SECONDS",
              help="Time running activities get to finish on SIGTERM/SIGINT, seconds.")
@log_level_option("info")
def worker(
    engine_spec: str,
    backend_url: str | None,
    concurrency: int | None,
    activity_types: str | None,
    queue: str | None,
    lease_timeout: float | None,
    shutdown_grace: float | None,
    log_level: str,
) -> None:
    """Run the WorkerEngine named MODULE:ENGINE until SIGTERM or SIGINT.

    On a signal the worker stops claiming, lets running activities finish
    within the shutdown grace, puts the rest back to pending and exits 0.
    """
    configure_logging(log_level)
    engine = load_engine(engine_spec)
    overrides: dict[str, Any] = {}
    if concurrency is not None:
        overrides["max_workers"] = concurrency
    if queue is not None:
        overrides["queue_name"] = queue
    if lease_timeout is not None:
        overrides["lease_timeout"] = lease_timeout
        if engine.config.heartbeat_interval >= lease_timeout:
            overrides["heartbeat_interval"] = 0.0  # back to lease_timeout / 3
    if shutdown_grace is not None:
        overrides["shutdown_grace"] = shutdown_grace
    if activity_types is not None:
        text = activity_types.strip()
        overrides["activity_types"] = "*" if text == "*" else [t.strip() for t in text.split(",") if t.strip()]
    try:
        if overrides:
            engine.configure(**overrides)
        if backend_url:
            engine.use_backend(backend_url)
    except rq.RunnerQError as exc:
        raise BadInput(str(exc)) from None

    async def serve() -> None:
        # run_until_stopped() installs the SIGTERM/SIGINT handlers before it
        # starts the engine, so a signal during connect/migrate stops cleanly.
        try:
            await engine.run_until_stopped()
        except rq.ConfigError as exc:
            if not backend_url and "no backend" in str(exc):
                raise BadInput(NO_BACKEND) from None
            raise BadInput(str(exc)) from None
        except Exception as exc:
            raise Fail(f"worker failed: {type(exc).__name__}: {exc}") from None

    run(serve())
