"""The ``prune`` command: delete finished activities (and old events) older than an age, in batches."""

from __future__ import annotations

import re

import click
import msgspec

import runnerq_fast as rq
from runnerq_fast.cli._common import (
    BadInput,
    backend_option,
    configure_logging,
    err,
    log_level_option,
    open_store,
    out,
    queue_option,
    require_backend,
    resolve_queue,
    run,
)
from runnerq_fast.errors import InvalidActivityError
from runnerq_fast.observability.retention import FINISHED_STATUSES

_AGE = re.compile(r"^\s*(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>s|m|h|d|w)?\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str, what: str) -> float:
    """``30``, ``90s``, ``15m``, ``24h``, ``7d`` or ``2w`` as seconds, else :class:`BadInput`."""
    match = _AGE.match(text)
    if match is None:
        raise BadInput(f"{what} must be a number of seconds or a number with a unit s, m, h, d or w "
                       f"(e.g. 24h, 7d), got {text!r}")
    return float(match["n"]) * _UNIT_SECONDS[match["unit"] or "s"]


@click.command()
@queue_option
@click.option("--older-than", "older_than", required=True, metavar="AGE",
              help="Delete activities that finished longer ago than AGE: seconds, or e.g. 90m, 24h, 7d.")
@click.option("--status", "statuses", multiple=True, type=click.Choice(FINISHED_STATUSES),
              help="Only this finished status (repeatable). Default: all four.")
@click.option("--events-older-than", "events_older_than", metavar="AGE", default=None,
              help="Also delete the queue's events older than AGE, of activities still stored too.")
@click.option("--batch-size", default=1000, show_default=True, type=click.IntRange(1, 100_000),
              help="Activities per batch (each batch is one short transaction).")
@click.option("--max-batches", default=None, type=click.IntRange(1), help="Stop after this many batches.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@backend_option
@log_level_option("warning")
def prune(queue: str | None, older_than: str, statuses: tuple[str, ...], events_older_than: str | None, batch_size: int,
          max_batches: int | None, as_json: bool, backend_url: str | None, log_level: str) -> None:
    """Delete the finished activities of a queue older than an age, with their events and idempotency keys.

    Only completed, failed, dead-lettered and cancelled activities are ever
    deleted; the age counts from when they finished. Runs in batches, each
    one short transaction, until nothing older is left.
    """
    configure_logging(log_level)
    url = require_backend(backend_url)
    age = parse_age(older_than, "--older-than")
    events_age = None if events_older_than is None else parse_age(events_older_than, "--events-older-than")

    async def go() -> rq.PruneReport:
        backend = await open_store(url)
        try:
            name, _ = await resolve_queue(backend, queue)  # the report names it
            return await rq.prune(backend, name, older_than=age, statuses=statuses or FINISHED_STATUSES,
                                  events_older_than=events_age, batch_size=batch_size, max_batches=max_batches)
        except InvalidActivityError as exc:
            raise BadInput(str(exc)) from None
        finally:
            await backend.close()

    report = run(go())
    if as_json:
        click.echo(msgspec.json.encode(report).decode())
        return
    out.print(f"queue {report.queue!r}: deleted {_count(report.activities, 'finished activity', 'finished activities')}"
              + (f" and {_count(report.events, 'old event', 'old events')}" if events_age is not None else "")
              + f" in {_count(report.batches, 'batch', 'batches')}, {report.seconds:.2f} s")
    if not report.complete:
        err.print("stopped at --max-batches: older finished activities are left; run it again")


def _count(n: int, one: str, many: str) -> str:
    """``1 batch``, ``2 batches``, ``1,000 batches``."""
    return f"{n:,} {one if n == 1 else many}"
