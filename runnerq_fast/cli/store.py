"""Commands about the store: ``migrate`` its schema, ``stats`` of a queue."""

from __future__ import annotations

import asyncpg
import click
import msgspec
from rich.table import Table

import runnerq_fast as rq
from runnerq_fast.cli._common import (
    NO_SCHEMA,
    Fail,
    backend_option,
    configure_logging,
    err,
    log_level_option,
    open_store,
    out,
    queue_option,
    require_backend,
    run,
)
from runnerq_fast.urls import redact_text, redact_url


@click.command()
@backend_option
@log_level_option("info")
def migrate(backend_url: str | None, log_level: str) -> None:
    """Create or upgrade the backend's schema (idempotent)."""
    configure_logging(log_level)
    url = require_backend(backend_url)

    async def go() -> str:
        backend = await open_store(url)
        try:
            await backend.migrate()
        except Exception as exc:
            raise Fail(redact_text(f"migration failed: {type(exc).__name__}: {exc}", url)) from None
        finally:
            await backend.close()
        return backend.name

    name = run(go())
    err.print(f"migrations applied on {name} backend {redact_url(url)}")


@click.command()
@queue_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@backend_option
@log_level_option("warning")
def stats(queue: str, as_json: bool, backend_url: str | None, log_level: str) -> None:
    """Count the activities of a queue by status."""
    configure_logging(log_level)
    url = require_backend(backend_url)

    async def go() -> rq.QueueStats:
        backend = await open_store(url, read_only=True)
        try:
            return await backend.stats(queue)
        except asyncpg.UndefinedTableError:
            raise Fail(NO_SCHEMA.format(url=redact_url(url))) from None
        finally:
            await backend.close()

    counts = run(go())
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
