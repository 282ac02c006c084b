"""Commands about the store: ``migrate`` its schema, ``stats`` of a queue, the list of ``queues``."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click
import msgspec
from rich.table import Table
from rich.text import Text

import runnerq_fast as rq
from runnerq_fast.backends.sqlfiles import UNKNOWN_MIGRATIONS
from runnerq_fast.cli._common import (
    DEFAULT_QUEUE,
    Fail,
    backend_option,
    check_queue_name,
    configure_logging,
    err,
    log_level_option,
    open_store,
    out,
    require_backend,
    run,
)
from runnerq_fast.urls import redact_text, redact_url

T = TypeVar("T")


@click.command()
@backend_option
@log_level_option("info")
def migrate(backend_url: str | None, log_level: str) -> None:
    """Create or upgrade the backend's schema (idempotent).

    Prints the migrations it applied, or that the store was already up to date, and a warning
    when the store holds migrations this release does not know (a newer runnerq-fast migrated
    it: it stays usable, the exit code is 0).
    """
    configure_logging(log_level)
    url = require_backend(backend_url)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_not_unknown_migrations)  # printed below as the command's own warning

    async def go() -> tuple[str, rq.MigrationReport | None]:
        backend = await open_store(url, migrate=False)  # so that migrate() reports what is applied
        try:
            report = await backend.migrate()
        except Exception as exc:
            raise Fail(redact_text(f"migration failed: {type(exc).__name__}: {exc}", url)) from None
        finally:
            await backend.close()
        return backend.name, report

    name, report = run(go())
    where = f"{name} backend {redact_url(url)}"
    if report is None:  # a backend without numbered migrations that reports nothing (Redis)
        err.print(f"migrate done on {where}")
        return
    if report.applied:
        err.print(f"migrations applied on {where}: {', '.join(f'{v:04d}' for v in report.applied)}")
    else:
        latest = (
            "" if report.latest is None else f" (it has every migration of this release, up to {report.latest:04d})"
        )
        err.print(f"already up to date: nothing to migrate on {where}{latest}")
    if report.warning is not None:
        err.print(f"warning: {report.warning}")


def _not_unknown_migrations(record: logging.LogRecord) -> bool:
    """Log filter: drop the backend's warning about unknown migrations (``migrate`` prints it)."""
    return not hasattr(record, UNKNOWN_MIGRATIONS)


def _counts_json(queue: str, counts: rq.QueueStats) -> dict[str, object]:
    return {"queue": queue, **msgspec.structs.asdict(counts), "total": counts.total}


async def _read(url: str, what: Callable[[rq.Backend], Awaitable[T]]) -> T:
    """``what(backend)`` on ``url`` opened read-only (no migration, no file created)."""
    backend = await open_store(url, read_only=True)
    try:
        return await what(backend)
    finally:
        await backend.close()


def _queues_table(summaries: list[rq.QueueSummary], title: str) -> Table:
    table = Table(title=title)
    table.add_column("queue")
    table.add_column("total", justify="right")
    table.add_column("by status (non-zero)")
    table.add_column("oldest ready", justify="right")
    now_ms = time.time() * 1000
    for s in summaries:
        counts = ", ".join(f"{status} {n:,}" for status, n in msgspec.structs.asdict(s.counts).items() if n)
        age = "" if s.oldest_ready_ms is None else f"{max(0.0, now_ms - s.oldest_ready_ms) / 1000:,.1f} s ago"
        table.add_row(s.queue, f"{s.counts.total:,}", counts, age)
    return table


def _summary_json(s: rq.QueueSummary) -> dict[str, object]:
    return {**_counts_json(s.queue, s.counts), "by_type": s.by_type, "oldest_ready_ms": s.oldest_ready_ms}


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON (a list, one object per queue) instead of a table.")
@backend_option
@log_level_option("warning")
def queues(as_json: bool, backend_url: str | None, log_level: str) -> None:
    """List the queues of the store with their counts by status and their oldest ready activity."""
    configure_logging(log_level)
    url = require_backend(backend_url)
    summaries = run(_read(url, lambda b: b.list_queues()))
    if as_json:
        click.echo(msgspec.json.encode([_summary_json(s) for s in summaries]).decode())
        return
    if not summaries:
        err.print("no queues in this store yet (a queue appears with its first activity)")
        return
    out.print(_queues_table(summaries, f"{len(summaries)} queue(s)"))


@click.command()
@click.option("--queue", "queue", default=None, metavar="NAME", callback=check_queue_name,
              help="Queue name. Without it: the store's only queue ('default' when it has none), as for "
                   "enqueue and the actions; every queue when there are several.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@backend_option
@log_level_option("warning")
def stats(queue: str | None, as_json: bool, backend_url: str | None, log_level: str) -> None:
    """Count the activities of a queue by status.

    Without --queue it says which queues the store has: it shows the only
    one, or a table of every queue (JSON: {"queues": [...]}) when there are several.
    """
    configure_logging(log_level)
    url = require_backend(backend_url)
    explicit = queue is not None
    if queue is None:
        summaries = run(_read(url, lambda b: b.list_queues()))
        if len(summaries) > 1:
            if as_json:
                click.echo(msgspec.json.encode({"queues": [_summary_json(s) for s in summaries]}).decode())
                return
            err.print(f"this store has {len(summaries)} queues; pass --queue NAME for one of them")
            out.print(_queues_table(summaries, f"{len(summaries)} queues"))
            return
        if summaries:
            queue = summaries[0].queue
            err.print(f"queue {queue!r} (the only queue in this store)")
        else:
            queue = DEFAULT_QUEUE
            err.print(f"queue {queue!r} (no queue in this store yet: a queue appears with its first activity)")
    name = queue
    counts = run(_read(url, lambda b: b.stats(name)))
    data = msgspec.structs.asdict(counts)
    if counts.total == 0 and explicit:
        # a misspelt --queue reads as an empty queue: name the ones the store has
        known = [s.queue for s in run(_read(url, lambda b: b.list_queues()))]
        if known and name not in known:
            shown = ", ".join(repr(q) for q in known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
            err.print(f"note: queue {name!r} has no activities; this store's queues: {shown}")
    if as_json:
        click.echo(msgspec.json.encode(_counts_json(name, counts)).decode())
        return
    table = Table(title=f"queue {name!r}")
    table.add_column("status")
    table.add_column("count", justify="right")
    for status, count in data.items():
        table.add_row(status, f"{count:,}")
    table.add_row(Text("total", style="bold"), Text(f"{counts.total:,}", style="bold"))
    out.print(table)
