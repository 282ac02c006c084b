"""``schedules MODULE:ENGINE``: the periodic schedules an engine runs, and their next ticks."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import click
import msgspec
from rich.table import Table

from runnerq_fast.cli._common import out
from runnerq_fast.cli.running import load_engine


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


@click.command()
@click.argument("engine_spec", metavar="MODULE:ENGINE")
@click.option("--next", "count", type=click.IntRange(min=1, max=100), default=3, show_default=True,
              help="Upcoming ticks to show per schedule.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def schedules(engine_spec: str, count: int, as_json: bool) -> None:
    """List the periodic schedules of the WorkerEngine named MODULE:ENGINE with their next ticks (UTC).

    Each tick's activity carries the metadata ``schedule`` (the name) and
    ``tick``, shown by ``inspect``; its idempotency key is
    ``periodic:<name>:<tick epoch ms>``.
    """
    engine = load_engine(engine_spec)
    now = time.time()
    rows: list[dict[str, Any]] = []
    for s in engine.schedules:
        ticks: list[str] = []
        at = now
        for _ in range(count):
            at = s.next_tick(at)
            ticks.append(_iso(at))
        rows.append({**msgspec.structs.asdict(s), "spec": s.spec, "next_ticks": ticks})
    if as_json:
        click.echo(msgspec.json.encode({"queue": engine.queue_name, "schedules": rows}).decode())
        return
    table = Table(title=f"schedules of {engine_spec} (queue {engine.queue_name!r})")
    for col in ("name", "activity type", "when", "timezone", "missed", "next ticks (UTC)"):
        table.add_column(col)
    for r in rows:
        shown = "\n".join(t.replace(".000+00:00", "Z") for t in r["next_ticks"])
        table.add_row(r["name"], r["activity_type"], r["spec"], r["timezone"], r["missed"], shown)
    out.print(table if rows else f"{engine_spec} has no schedules")
