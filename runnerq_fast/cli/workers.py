"""``runnerq-fast workers``: the live engines of the worker registry, as a table or JSON."""

from __future__ import annotations

import time

import click
import msgspec
from rich.table import Table

from runnerq_fast.cli._common import (
    backend_option,
    check_queue_name,
    configure_logging,
    log_level_option,
    open_store,
    out,
    require_backend,
    run,
)
from runnerq_fast.models import WorkerInfo

_LEFT = frozenset({"worker id", "queue", "host", "types"})

HELD_NOTE = ("held: activities claimed and not yet acknowledged at the last heartbeat (running, or finished with "
             "the ack not yet written), so it may exceed slots (--concurrency) for a moment")
"""What the ``held`` column counts, printed under the table."""



def _ago(ms: int, now_ms: int) -> str:
    s = max(0.0, (now_ms - ms) / 1000.0)
    if s < 120:
        return f"{s:.1f} s ago"
    if s < 7200:
        return f"{s / 60:.0f} min ago"
    return f"{s / 3600:.1f} h ago"


@click.command()
@click.option("--queue", "queue", default=None, callback=check_queue_name,
              help="Only this queue's workers. Default: every queue.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object with a workers list) instead of a table.")
@backend_option
@log_level_option("warning")
def workers(queue: str | None, as_json: bool, backend_url: str | None, log_level: str) -> None:
    """List the live workers: engines that heartbeat into the worker registry.

    An engine registers at start, refreshes its entry on every heartbeat and
    leaves at a clean stop; one that stops heartbeating drops out after three
    heartbeat intervals.
    """
    configure_logging(log_level)
    url = require_backend(backend_url)

    async def go() -> list[WorkerInfo]:
        backend = await open_store(url, read_only=True)
        try:
            return await backend.list_workers(queue)
        finally:
            await backend.close()

    found = run(go())
    if as_json:
        click.echo(msgspec.json.encode({"workers": [msgspec.structs.asdict(w) for w in found]}).decode())
        return
    now = int(time.time() * 1000)
    table = Table(title=f"live workers{'' if queue is None else f' of queue {queue!r}'}: {len(found)}",
                  caption=HELD_NOTE if found else None)
    for name in ("worker id", "queue", "host", "pid", "types", "held", "slots", "started", "last seen"):
        table.add_column(name, justify="left" if name in _LEFT else "right")
    for w in found:
        table.add_row(w.worker_id, w.queue, w.host, str(w.pid), ", ".join(w.activity_types),
                      str(w.in_flight), str(w.concurrency), _ago(w.started_at_ms, now), _ago(w.last_seen_ms, now))
    out.print(table)
