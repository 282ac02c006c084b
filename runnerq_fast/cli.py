"""The ``runnerq-fast`` command line.

Every command that touches a backend takes ``--backend URL`` or reads the
``RUNNERQ_BACKEND`` environment variable (``memory://``,
``sqlite:///file.db``, ``postgresql://user@host:port/db``)::

    runnerq-fast migrate --backend postgresql://postgres@127.0.0.1/app
    runnerq-fast worker examples.shop.app:engine --concurrency 32
    runnerq-fast enqueue send_email --payload '{"to": "a@b.c"}' --priority high --wait 10
    runnerq-fast stats --queue default --json
    runnerq-fast inspect 3f2a...
    runnerq-fast bench --backend memory:// -n 100000 --output-json bench.json
    runnerq-fast demo                        # mixed workload on ./runnerq-demo.db (SQLite)
    runnerq-fast demo-shop --orders 5        # from the repository root

Exit codes: 0 success; 1 the operation failed (activity failed, timeout,
backend unreachable); 2 bad usage or input (nothing was stored).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TypeVar
from urllib.parse import urlsplit

import asyncpg
import click
import msgspec
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import runnerq_fast as rq
from runnerq_fast import demo as rq_demo
from runnerq_fast.bench import BenchConfig, BenchResult, redact_url, result_to_json, run_bench
from runnerq_fast.engine import run_with_uvloop

__all__ = ["cli", "load_engine", "main"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

BACKEND_ENV = "RUNNERQ_BACKEND"
"""Environment variable naming the backend URL when ``--backend`` is not given."""

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


# ----------------------------------------------------------------- helpers
class _Fail(click.ClickException):
    """A clean failure: ``error: <message>`` on stderr, exit code 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


class _BadInput(_Fail):
    """Bad input: nothing was done, exit code 2."""

    exit_code = 2


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop (``RUNNERQ_LOOP=asyncio`` forces asyncio) and return its value."""
    box: list[T] = []

    async def main() -> None:
        box.append(await coro)

    run_with_uvloop(main())
    return box[0]


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )


NO_BACKEND = (
    f"no backend given: pass --backend URL or set {BACKEND_ENV} "
    "(e.g. postgresql://user@localhost:5432/app or memory://)"
)


def _require_backend(url: str | None) -> str:
    if not url:
        raise _BadInput(NO_BACKEND)
    return url


async def _open(url: str, *, read_only: bool = False) -> rq.Backend:
    """Open ``url``, turning every failure into a clean CLI error.

    ``read_only`` opens without applying migrations, so looking at a database
    never creates tables in it (nor, for SQLite, the file itself).
    """
    try:
        scheme = urlsplit(url).scheme.lower()
        if read_only and scheme in ("postgresql", "postgres"):
            return await rq.connect(url, migrate=False)
        if read_only and scheme == "sqlite":
            return await rq.connect(url, read_only=True)
        return await rq.connect(url)
    except rq.ConfigError as exc:
        raise _BadInput(str(exc)) from None
    except Exception as exc:
        raise _Fail(f"cannot open backend {redact_url(url)}: {type(exc).__name__}: {exc}") from None


_NO_SCHEMA = "no runnerq-fast schema in {url}; create it with `runnerq-fast migrate --backend URL`"


def backend_option(fn: F) -> F:
    """The shared ``--backend URL`` option (falls back to ``RUNNERQ_BACKEND``)."""
    return click.option(
        "--backend",
        "backend_url",
        envvar=BACKEND_ENV,
        show_envvar=True,
        metavar="URL",
        help="Backend URL: memory://, sqlite:///file.db, postgresql://user@host:port/db.",
    )(fn)


def log_level_option(default: str) -> Callable[[F], F]:
    """The shared ``--log-level`` option."""

    def deco(fn: F) -> F:
        return click.option(
            "--log-level",
            type=click.Choice(LOG_LEVELS, case_sensitive=False),
            default=default,
            show_default=True,
            help="Logging level (logs go to stderr).",
        )(fn)

    return deco


def queue_option(fn: F) -> F:
    """The shared ``--queue NAME`` option."""
    return click.option("--queue", "queue", default="default", show_default=True, help="Queue name.")(fn)


if TYPE_CHECKING:  # click >= 8.3 makes ParamType generic; older releases are not subscriptable
    _PriorityParam = click.ParamType[rq.Priority, Any]
else:
    _PriorityParam = click.ParamType


class PriorityType(_PriorityParam):
    """``low``, ``normal``, ``high``, ``critical`` or ``1``-``4``."""

    name = "priority"
    _names: ClassVar[dict[str, rq.Priority]] = {p.name.lower(): p for p in rq.Priority}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> rq.Priority:
        if isinstance(value, rq.Priority):
            return value
        text = str(value).strip().lower()
        if text in self._names:
            return self._names[text]
        if not (text.isdigit() and 1 <= int(text) <= 4):
            self.fail(f"{value!r} is not one of low, normal, high, critical or 1-4", param, ctx)
        return rq.Priority(int(text))


def _parse_json(text: str, what: str) -> Any:
    try:
        return msgspec.json.decode(text.encode())
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise _BadInput(f"{what} is not valid JSON: {exc}") from None


def _read_payload_arg(text: str) -> str:
    """``--payload`` text, or the content of ``@FILE`` / ``@-`` (standard input)."""
    if not text.startswith("@"):
        return text
    source = text[1:]
    try:
        if source == "-":
            return sys.stdin.read()
        with open(source, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise _BadInput(f"--payload {text}: cannot read it: {exc}") from None


def _json_value(data: bytes | str | None) -> Any:
    """Stored JSON text as a value, for nesting in JSON output (the text itself if it does not decode)."""
    if data is None:
        return None
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        return _json_text(data)


def _json_text(data: bytes | str | None) -> str:
    if data is None:
        return "null"
    return data.decode() if isinstance(data, bytes) else data


# ---------------------------------------------------------------- commands
@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(rq.__version__, prog_name="runnerq-fast")
def cli() -> None:
    """runnerq-fast: a durable background-activity queue.

    The backend comes from --backend URL or the RUNNERQ_BACKEND environment variable.
    """


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
        raise _BadInput(f"expected MODULE:ENGINE (e.g. myapp.tasks:engine), got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise _BadInput(f"cannot import module {module_name!r}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise _BadInput(f"module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(obj, rq.WorkerEngine) and callable(obj):
        obj = obj()
    if not isinstance(obj, rq.WorkerEngine):
        raise _BadInput(f"{spec} is a {type(obj).__name__}, not a runnerq_fast.WorkerEngine")
    return obj


@cli.command()
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
    _configure_logging(log_level)
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
        raise _BadInput(str(exc)) from None

    async def serve() -> None:
        # run_until_stopped() installs the SIGTERM/SIGINT handlers before it
        # starts the engine, so a signal during connect/migrate stops cleanly.
        try:
            await engine.run_until_stopped()
        except rq.ConfigError as exc:
            if not backend_url and "no backend" in str(exc):
                raise _BadInput(NO_BACKEND) from None
            raise _BadInput(str(exc)) from None
        except Exception as exc:
            raise _Fail(f"worker failed: {type(exc).__name__}: {exc}") from None

    _run(serve())


@cli.command()
@click.argument("activity_type", metavar="TYPE")
@click.option("--payload", "payload_text", default="null", show_default=True, metavar="JSON",
              help="Payload as JSON; @FILE reads it from a file, @- from standard input.")
@click.option("--priority", type=PriorityType(), default="normal", show_default=True,
              help="low|normal|high|critical or 1-4.")
@click.option("--delay", type=float, default=0.0, metavar="SECONDS", help="Start no earlier than this from now.")
@click.option("--max-retries", type=int, help="Retries after the first attempt (default 3).")
@click.option("--timeout", type=float, metavar="SECONDS", help="Handler timeout (default 300, 0 = none).")
@click.option("--metadata", "metadata_text", metavar="JSON", help='String metadata, e.g. \'{"tenant": "t1"}\'.')
@click.option("--idempotency-key", metavar="KEY", help="Deduplicate on KEY within (queue, type).")
@click.option("--on-duplicate", type=click.Choice([o.name.lower() for o in rq.OnDuplicate]),
              default="return_existing", show_default=True, help="What a taken idempotency key does.")
@click.option("--wait", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Wait up to SECONDS for the result and print it as JSON.")
@queue_option
@backend_option
@log_level_option("warning")
def enqueue(
    activity_type: str,
    payload_text: str,
    priority: rq.Priority,
    delay: float,
    max_retries: int | None,
    timeout: float | None,
    metadata_text: str | None,
    idempotency_key: str | None,
    on_duplicate: str,
    wait: float | None,
    queue: str,
    backend_url: str | None,
    log_level: str,
) -> None:
    """Enqueue one activity of TYPE and print its id.

    With --wait, a second line holds the result as JSON; a failed, dead-lettered
    or cancelled activity or a timeout exits 1. Bad input exits 2 and stores nothing.
    """
    _configure_logging(log_level)
    payload = _parse_json(_read_payload_arg(payload_text), "--payload")
    metadata: dict[str, str] | None = None
    if metadata_text is not None:
        raw = _parse_json(metadata_text, "--metadata")
        if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
            raise _BadInput('--metadata must be a JSON object of strings, e.g. {"tenant": "t1"}')
        metadata = raw
    url = _require_backend(backend_url)
    try:
        config = rq.WorkerConfig(queue_name=queue)
        # validate everything before touching the backend
        probe = rq.ActivityExecutor(rq.MemoryBackend(), queue, config)
        _builder(probe, activity_type, payload, priority, delay, max_retries, timeout, metadata,
                 idempotency_key, on_duplicate).build()
    except rq.RunnerQError as exc:
        raise _BadInput(str(exc)) from None

    async def go() -> tuple[str, bool, Any]:
        backend = await _open(url)
        try:
            executor = rq.ActivityExecutor(backend, queue, config)
            builder = _builder(executor, activity_type, payload, priority, delay, max_retries, timeout, metadata,
                               idempotency_key, on_duplicate)
            try:
                future = await builder.execute()
            except rq.DuplicateActivityError as exc:
                raise _Fail(str(exc)) from None
            except rq.InvalidActivityError as exc:
                raise _BadInput(str(exc)) from None
            if wait is None:
                return future.activity_id, future.created, None
            click.echo(future.activity_id)
            try:
                value = await future.result(timeout=wait)
            except TimeoutError:
                raise _Fail(f"activity {future.activity_id} did not finish within {wait} s") from None
            except (rq.ActivityFailed, rq.ActivityCancelled) as exc:
                raise _Fail(str(exc)) from None
            return future.activity_id, future.created, value
        finally:
            await backend.close()

    activity_id, created, value = _run(go())
    if wait is None:
        click.echo(activity_id)
    else:
        click.echo(msgspec.json.encode(value).decode())
    if not created:
        err.print(f"note: idempotency key {idempotency_key!r} matched existing activity {activity_id}")


def _builder(
    executor: rq.ActivityExecutor,
    activity_type: str,
    payload: Any,
    priority: rq.Priority,
    delay: float,
    max_retries: int | None,
    timeout: float | None,
    metadata: dict[str, str] | None,
    idempotency_key: str | None,
    on_duplicate: str,
) -> rq.ActivityBuilder:
    b = executor.activity(activity_type).payload(payload).priority(priority).delay(delay)
    if max_retries is not None:
        b = b.max_retries(max_retries)
    if timeout is not None:
        b = b.timeout(timeout)
    if metadata is not None:
        b = b.metadata(metadata)
    if idempotency_key is not None:
        b = b.idempotency_key(idempotency_key, rq.OnDuplicate[on_duplicate.upper()])
    return b


@cli.command()
@backend_option
@log_level_option("info")
def migrate(backend_url: str | None, log_level: str) -> None:
    """Create or upgrade the backend's schema (idempotent)."""
    _configure_logging(log_level)
    url = _require_backend(backend_url)

    async def go() -> str:
        backend = await _open(url)
        try:
            await backend.migrate()
        except Exception as exc:
            raise _Fail(f"migration failed: {type(exc).__name__}: {exc}") from None
        finally:
            await backend.close()
        return backend.name

    name = _run(go())
    err.print(f"migrations applied on {name} backend {redact_url(url)}")


@cli.command()
@queue_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@backend_option
@log_level_option("warning")
def stats(queue: str, as_json: bool, backend_url: str | None, log_level: str) -> None:
    """Count the activities of a queue by status."""
    _configure_logging(log_level)
    url = _require_backend(backend_url)

    async def go() -> rq.QueueStats:
        backend = await _open(url, read_only=True)
        try:
            return await backend.stats(queue)
        except asyncpg.UndefinedTableError:
            raise _Fail(_NO_SCHEMA.format(url=redact_url(url))) from None
        finally:
            await backend.close()

    counts = _run(go())
    data = msgspec.structs.asdict(counts)
    if as_json:
        click.echo(msgspec.json.encode({"queue": queue, **data, "total": counts.total}).decode())
        return
    table = Table(title=f"queue {queue!r}")
    table.add_column("status")
    table.add_column("count", justify="right")
    for status, count in data.items():
        table.add_row(status, f"{count:,}")
    table.add_row("[bold]total[/bold]", f"[bold]{counts.total:,}[/bold]")
    out.print(table)


@cli.command()
@click.argument("activity_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@backend_option
@log_level_option("warning")
def inspect(activity_id: str, as_json: bool, backend_url: str | None, log_level: str) -> None:
    """Show one activity, its events and its result."""
    _configure_logging(log_level)
    url = _require_backend(backend_url)

    async def go() -> tuple[rq.ActivitySnapshot | None, list[rq.ActivityEvent], rq.ActivityResult | None]:
        backend = await _open(url, read_only=True)
        try:
            snap = await backend.get_activity(activity_id)
            if snap is None:
                return None, [], None
            return snap, await backend.get_events(activity_id), await backend.get_result(activity_id)
        except asyncpg.UndefinedTableError:
            raise _Fail(_NO_SCHEMA.format(url=redact_url(url))) from None
        finally:
            await backend.close()

    snap, events, result = _run(go())
    if snap is None:
        raise _Fail(f"no activity {activity_id!r}")
    if as_json:
        doc = {
            "activity": {**msgspec.structs.asdict(snap), "payload": _json_value(snap.payload),
                         "metadata": _json_value(snap.metadata)},
            "events": [msgspec.structs.asdict(e) for e in events],
            "result": None if result is None else {**msgspec.structs.asdict(result), "data": _json_value(result.data)},
        }
        click.echo(msgspec.json.encode(doc).decode())
        return
    table = Table(title=f"activity {activity_id}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for field, value in msgspec.structs.asdict(snap).items():
        shown = _json_text(value) if field in ("payload", "metadata") else _fmt(value, field)
        table.add_row(field, shown)
    out.print(table)
    ev = Table(title="events")
    for col in ("id", "at", "event", "detail"):
        ev.add_column(col)
    for e in events:
        ev.add_row(str(e.id), _fmt(e.at_ms, "at_ms"), e.event_type, e.detail or "")
    out.print(ev)
    if result is None:
        out.print("result: (not finished)")
    else:
        out.print(f"result: {result.status}  data={_json_text(result.data)}  error={result.error}")


def _fmt(value: Any, field: str) -> str:
    if value is None:
        return "-"
    if field.endswith("_ms") and isinstance(value, int) and value > 10**11:
        return datetime.fromtimestamp(value / 1000, UTC).isoformat(timespec="milliseconds")
    return str(value)


@cli.command()
@backend_option
@click.option("-n", "n", type=click.IntRange(min=1), default=20_000, show_default=True,
              help="Activities to enqueue and drain.")
@click.option("--batch-size", type=click.IntRange(min=1), default=500, show_default=True,
              help="Activities per enqueue_many call.")
@click.option("--concurrency", "-c", type=click.IntRange(min=1), help="Engine max_workers (default: engine default).")
@click.option("--queue", help="Queue name (default: a fresh bench-<random> queue).")
@click.option("--idle-samples", type=click.IntRange(min=0), default=200, show_default=True,
              help="Single enqueues on an idle engine for the idle latency (0 skips).")
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
    output_json: Path | None,
    no_progress: bool,
    log_level: str,
) -> None:
    """Measure enqueue/s, drain/s and enqueue-to-start latency of one engine.

    Enqueues N no-op activities on a fresh queue in batches, drains them with
    one WorkerEngine, then measures the latency of single activities on the
    idle engine. Nothing is deleted.
    """
    _configure_logging(log_level)
    url = _require_backend(backend_url)
    try:
        config = BenchConfig(backend_url=url, n=n, batch_size=batch_size, concurrency=concurrency,
                             queue_name=queue, idle_samples=idle_samples)
    except rq.ConfigError as exc:
        raise _BadInput(str(exc)) from None

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
            raise _BadInput(str(exc)) from None
        except (click.ClickException, asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise _Fail(f"benchmark failed: {type(exc).__name__}: {exc}") from None

    with progress:
        result = _run(go())
    out.print(_bench_table(result))
    if output_json is not None:
        output_json.write_bytes(result_to_json(result))
        err.print(f"wrote {output_json}")


@cli.command()
@click.option("--backend", "backend_url", metavar="URL",
              help=f"Backend URL (default: {rq_demo.DEFAULT_URL}, a SQLite file in the working directory). "
                   f"{BACKEND_ENV} is not read: the demo never writes to your configured backend unless asked.")
@click.option("-n", "n", type=click.IntRange(min=rq_demo.MIN_N, max=rq_demo.MAX_N),
              default=rq_demo.DEFAULT_N, show_default=True,
              help="Activities in all (chained children included).")
@click.option("--concurrency", "-c", type=click.IntRange(min=1), default=128, show_default=True,
              help="Engine max_workers.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=120.0, show_default=True,
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
    _configure_logging(log_level)
    url = backend_url or rq_demo.DEFAULT_URL
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, disable=no_progress or not err.is_terminal, transient=False,
    )
    task = progress.add_task("activities finished", total=n)

    def report(done: int, total: int) -> None:
        progress.update(task, completed=done, total=total)

    async def go() -> rq_demo.DemoReport:
        try:
            return await rq_demo.run_demo(url, n, concurrency=concurrency, timeout=timeout, progress=report)
        except rq.ConfigError as exc:
            raise _BadInput(str(exc)) from None
        except (click.ClickException, asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise _Fail(f"demo failed on {redact_url(url)}: {type(exc).__name__}: {exc}") from None

    err.print(f"runnerq-fast demo: {n:,} activities on {redact_url(url)}")
    with progress:
        result = _run(go())
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
        out.print(f"data: {result.location}  queue [bold]{result.queue}[/bold]  (in-process store: gone when this "
                  "process ends; use --backend sqlite:///FILE or postgresql://... to keep it)")
    else:
        out.print(f"data: {result.location}  queue [bold]{result.queue}[/bold]  ({where})")
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
        raise _Fail(f"the demo did not finish within {timeout:g} s")
    if not result.succeeded:
        raise _Fail("the demo ended with unexpected counts (see the table)")


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


@cli.command("demo-shop")
@click.option("--backend", "backend_url", envvar=BACKEND_ENV, show_envvar=True, default="memory://",
              show_default=True, metavar="URL", help="Backend URL (default: the in-process memory store).")
@click.option("--orders", type=click.IntRange(min=1), default=3, show_default=True, help="Orders to place.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
              metavar="SECONDS", help="Longest the whole run may take.")
@log_level_option("warning")
def demo_shop(backend_url: str, orders: int, timeout: float, log_level: str) -> None:
    """Run the examples/shop order pipeline end to end in this process.

    Starts the shop engine, places --orders orders (8 chained activities each,
    with retries and a delayed step) and prints the final counts. Run it from
    the repository root, where the examples/ package lives.
    """
    _configure_logging(log_level)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        demo: Any = importlib.import_module("examples.shop.demo")
    except ImportError as exc:
        raise _BadInput(f"demo-shop needs the repository's examples/ package; run it from the repository root "
                        f"({exc})") from None
    started = time.perf_counter()
    try:
        stats = _run(demo.run_demo(backend_url, orders, timeout))
    except rq.ConfigError as exc:
        raise _BadInput(str(exc)) from None
    except Exception as exc:
        raise _Fail(f"demo failed: {type(exc).__name__}: {exc}") from None
    out.print(demo.summary_table(stats, orders, time.perf_counter() - started))
    if not demo.succeeded(stats, orders):
        raise _Fail("not every activity completed")


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
    if r.idle_latency.missed:
        rows.append(("idle probes that never started", str(r.idle_latency.missed)))
    for name, value in rows:
        table.add_row(name, value)
    return table


def main(argv: list[str] | None = None) -> NoReturn:
    """Console-script entry point (``runnerq-fast``)."""
    cli.main(args=argv, prog_name="runnerq-fast")
    raise SystemExit(0)  # pragma: no cover - cli.main always exits


if __name__ == "__main__":
    main()
