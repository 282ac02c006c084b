"""What every command shares: the backend/queue/log-level options, opening a backend, JSON
helpers, the consoles, and the two clean failures with their exit codes.

Exit codes: 0 success; 1 the operation failed (:class:`Fail`: activity failed, timeout,
backend unreachable); 2 bad usage or input (:class:`BadInput`: nothing was stored).
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, ClassVar, TextIO, TypeVar
from urllib.parse import urlsplit

import asyncpg
import click
import msgspec
from rich.console import Console

import runnerq_fast as rq
from runnerq_fast.config import check_queue_name as check_queue_name_text
from runnerq_fast.engine import run_with_uvloop
from runnerq_fast.urls import password_hint, redact_text, redact_url

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

BACKEND_ENV = "RUNNERQ_BACKEND"
"""Environment variable naming the backend URL when ``--backend`` is not given."""

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

PIPED_WIDTH = 10_000
"""Width of a console writing to a pipe or file without ``COLUMNS`` set: rich would take 80 columns and cut
table cells (queue names, ids) with an ellipsis, which a script reading the output cannot use."""


def _console(stream: TextIO, *, stderr: bool) -> Console:
    piped = not stream.isatty() and not os.environ.get("COLUMNS")
    # markup off: what the commands print holds user text (paths, URLs, queue names, types, errors), where
    # rich would read "[x]" as a style and drop it, and fail on "[/x]"; styled parts are rich.text.Text
    return Console(stderr=stderr, highlight=False, soft_wrap=True, markup=False,
                   width=PIPED_WIDTH if piped else None)


out = _console(sys.stdout, stderr=False)
err = _console(sys.stderr, stderr=True)


# ----------------------------------------------------------------- helpers
class Fail(click.ClickException):
    """A clean failure: ``error: <message>`` on stderr, exit code 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


class BadInput(Fail):
    """Bad input: nothing was done, exit code 2."""

    exit_code = 2


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop (``RUNNERQ_LOOP=asyncio`` forces asyncio) and return its value.

    Raises
    ------
    Fail
        For a :class:`~runnerq_fast.BackendError` the command did not handle: one line naming the
        store and the cause (a PostgreSQL database without the schema says to run ``migrate``).
    """
    box: list[T] = []

    async def main() -> None:
        box.append(await coro)

    try:
        run_with_uvloop(main())
    except rq.BackendError as exc:
        if isinstance(exc.__cause__, asyncpg.UndefinedTableError):
            raise Fail(f"no runnerq-fast schema: {exc}; create it with `runnerq-fast migrate --backend URL`") from None
        raise Fail(str(exc)) from None
    return box[0]


class _ActivityTag(rq.ActivityLogFilter):
    """The log context, plus ``activity_tag``: `` [type id #attempt]`` inside an activity, else empty."""

    def filter(self, record: logging.LogRecord) -> bool:
        super().filter(record)
        fields = record.__dict__
        activity_id = fields["activity_id"]
        fields["activity_tag"] = (
            f" [{fields['activity_type']} {activity_id} #{fields['attempt']}]" if activity_id is not None else ""
        )
        return True


def configure_logging(level: str) -> None:
    """Log to stderr at ``level``; a line logged while an activity runs names it (``[type id #attempt]``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_ActivityTag())
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)-7s %(name)s:%(activity_tag)s %(message)s",
        handlers=[handler],
    )


NO_BACKEND = (
    f"no backend given: pass --backend URL or set {BACKEND_ENV} "
    "(e.g. postgresql://user@localhost:5432/app or memory://)"
)


def require_backend(url: str | None) -> str:
    if not url:
        raise BadInput(NO_BACKEND)
    return url


async def open_store(url: str, *, read_only: bool = False, migrate: bool = True) -> rq.Backend:
    """Open ``url``, turning every failure into a clean CLI error.

    ``read_only`` opens without applying migrations, so looking at a database
    never creates tables in it (nor, for SQLite, the file itself). ``migrate=False``
    opens a SQL store for writing without applying them (``migrate`` applies them itself,
    to report what it did).
    """
    try:
        try:
            scheme = urlsplit(url).scheme.lower()
        except ValueError as exc:
            raise rq.ConfigError(f"malformed backend URL {redact_url(url)!r}: {exc}{password_hint(url)}") from None
        if (read_only or not migrate) and scheme in ("postgresql", "postgres"):
            return await rq.connect(url, migrate=False)
        if read_only and scheme == "sqlite":
            return await rq.connect(url, read_only=True)
        if not migrate and scheme == "sqlite":
            return await rq.connect(url, migrate=False)
        return await rq.connect(url)
    except rq.ConfigError as exc:
        raise BadInput(redact_text(str(exc), url)) from None
    except Exception as exc:
        raise Fail(redact_text(f"cannot open backend {url}: {type(exc).__name__}: {exc}", url)) from None




def backend_option(fn: F) -> F:
    """The shared ``--backend URL`` option (falls back to ``RUNNERQ_BACKEND``)."""
    return click.option(
        "--backend",
        "backend_url",
        envvar=BACKEND_ENV,
        show_envvar=True,
        metavar="URL",
        help="Backend URL: memory://, sqlite:///file.db, postgresql://user@host:port/db, redis://host:port/0, "
             "redis+cluster://host:port,host:port.",
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


def check_queue_name(ctx: click.Context | None, param: click.Parameter | None, value: Any) -> Any:
    """Click callback: refuse a queue name no backend can hold (exit 2), the rules of ``queue_name``.

    ``value`` may be one name, a tuple of names (a repeatable option) or None (not given).
    """
    names = value if isinstance(value, tuple) else (value,)
    for name in names:
        if name is None:
            continue
        try:
            check_queue_name_text(name, "the queue name")
        except rq.ConfigError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    return value


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan`` and ``inf`` (a NaN passes every range comparison)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


DEFAULT_QUEUE = "default"
"""The queue a command uses without ``--queue`` when the store has none yet."""

QUEUE_RULE = "Without it: the store's only queue, 'default' when it has none; several need --queue."


def queue_option(fn: F) -> F:
    """The shared ``--queue NAME`` option: ``None`` when not given, for :func:`resolve_queue`."""
    return click.option("--queue", "queue", default=None, metavar="NAME", help=f"Queue name. {QUEUE_RULE}",
                        callback=check_queue_name)(fn)


def _names(summaries: list[rq.QueueSummary]) -> str:
    shown = ", ".join(repr(s.queue) for s in summaries[:10])
    return shown + (f" and {len(summaries) - 10} more" if len(summaries) > 10 else "")


async def resolve_queue(backend: rq.Backend, queue: str | None) -> tuple[str, str | None]:
    """The queue a command acts on, and why when ``--queue`` was not given (one rule for every command).

    ``queue`` when given; else the store's only queue; in a store with no activity yet, the only
    queue its running workers serve (the worker registry), else :data:`DEFAULT_QUEUE`. ``stats``
    applies the same rule (and lists the queues where there are several).

    Returns
    -------
    tuple of (str, str or None)
        The queue name and, when it was not given, the reason to print (``"the only queue in this store"``).

    Raises
    ------
    BadInput
        When ``queue`` is ``None`` and the store has several queues: the command names them and asks for
        ``--queue`` rather than guess (an activity sent to a queue no worker serves waits for ever).
    """
    if queue is not None:
        return queue, None
    summaries = await backend.list_queues()
    if not summaries:
        # nothing stored yet: the queue the running workers serve, if they serve one
        served = sorted({w.queue for w in await backend.list_workers()})
        if len(served) == 1:
            return served[0], "the only queue a running worker serves; none is stored yet"
        if len(served) > 1:
            shown = ", ".join(repr(q) for q in served[:10])
            if len(served) > 10:
                shown += f" and {len(served) - 10} more"
            raise BadInput(f"this store has no activity yet and its running workers serve {len(served)} queues "
                           f"({shown}): pass --queue NAME")
        return DEFAULT_QUEUE, "no queue in this store yet"
    if len(summaries) == 1:
        return summaries[0].queue, "the only queue in this store"
    raise BadInput(f"this store has {len(summaries)} queues ({_names(summaries)}): pass --queue NAME")


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


def parse_json(text: str, what: str) -> Any:
    """``text`` decoded as JSON, else :class:`BadInput` naming ``what`` (too deep a nesting included)."""
    try:
        return msgspec.json.decode(text.encode())
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BadInput(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadInput(f"{what} is nested too deeply to decode") from None
    except UnicodeEncodeError as exc:
        raise BadInput(f"{what} holds text that is not valid Unicode: {exc.reason}") from None


def read_payload_arg(text: str) -> str:
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
        raise BadInput(f"--payload {text}: cannot read it: {exc}") from None


def json_value(data: bytes | str | None) -> Any:
    """Stored JSON text as a value, for nesting in JSON output (the text itself if it does not decode)."""
    if data is None:
        return None
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        return json_text(data)


def json_text(data: bytes | str | None) -> str:
    if data is None:
        return "null"
    return data.decode(errors="replace") if isinstance(data, bytes) else data  # a corrupt row's bytes too
