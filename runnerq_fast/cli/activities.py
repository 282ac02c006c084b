"""Commands about activities: ``enqueue`` one, ``inspect`` one with its events and result, and the
operator actions ``cancel``, ``retry``, ``run-now``, ``set-priority`` and ``delete`` (by ids or by filter)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
import msgspec
from rich.table import Table

import runnerq_fast as rq
from runnerq_fast import filters
from runnerq_fast.cli._common import (
    BadInput,
    Fail,
    FiniteFloatRange,
    PriorityType,
    backend_option,
    configure_logging,
    err,
    json_text,
    json_value,
    log_level_option,
    open_store,
    out,
    parse_json,
    queue_option,
    read_payload_arg,
    require_backend,
    resolve_queue,
    run,
)


@click.command()
@click.argument("activity_type", metavar="TYPE")
@click.option("--payload", "payload_text", default="null", show_default=True, metavar="JSON",
              help="Payload as JSON; @FILE reads it from a file, @- from standard input.")
@click.option("--priority", type=PriorityType(),
              help="low|normal|high|critical or 1-4 (default the type's, else normal).")
@click.option("--delay", type=float, default=0.0, metavar="SECONDS", help="Start no earlier than this from now.")
@click.option("--max-retries", type=int,
              help="Retries after the first attempt (default the type's, registered by its workers, else 3).")
@click.option("--timeout", type=float, metavar="SECONDS",
              help="Handler timeout (default the type's, else 300; 0 = none).")
@click.option("--metadata", "metadata_text", metavar="JSON", help='String metadata, e.g. \'{"tenant": "t1"}\'.')
@click.option("--idempotency-key", metavar="KEY", help="Deduplicate on KEY within (queue, type).")
@click.option("--on-duplicate", type=click.Choice([o.name.lower() for o in rq.OnDuplicate]),
              default="return_existing", show_default=True, help="What a taken idempotency key does.")
@click.option("--wait", type=FiniteFloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Wait up to SECONDS for the result and print it as JSON.")
@queue_option
@backend_option
@log_level_option("warning")
def enqueue(
    activity_type: str,
    payload_text: str,
    priority: rq.Priority | None,
    delay: float,
    max_retries: int | None,
    timeout: float | None,
    metadata_text: str | None,
    idempotency_key: str | None,
    on_duplicate: str,
    wait: float | None,
    queue: str | None,
    backend_url: str | None,
    log_level: str,
) -> None:
    """Enqueue one activity of TYPE and print its id (the queue it went to on stderr).

    Without --queue it goes to the store's only queue ('default' in a store without
    one); a store with several queues needs --queue. With --wait, a second line
    holds the result as JSON; a failed, dead-lettered or cancelled activity or a
    timeout exits 1. Bad input exits 2 and stores nothing.
    """
    configure_logging(log_level)
    payload = parse_json(read_payload_arg(payload_text), "--payload")
    metadata: dict[str, str] | None = None
    if metadata_text is not None:
        raw = parse_json(metadata_text, "--metadata")
        if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
            raise BadInput('--metadata must be a JSON object of strings, e.g. {"tenant": "t1"}')
        metadata = raw
    url = require_backend(backend_url)
    try:
        config = rq.WorkerConfig(queue_name=queue or "default")
        # validate everything before touching the backend
        probe = rq.ActivityExecutor(rq.MemoryBackend(), config.queue_name, config)
        _builder(probe, activity_type, payload, priority, delay, max_retries, timeout, metadata,
                 idempotency_key, on_duplicate).build()
    except rq.RunnerQError as exc:
        raise BadInput(str(exc)) from None

    async def go() -> tuple[str, bool, Any]:
        backend = await open_store(url)
        try:
            name, why = await resolve_queue(backend, queue)
            executor = rq.ActivityExecutor(backend, name, msgspec.structs.replace(config, queue_name=name))
            builder = _builder(executor, activity_type, payload, priority, delay, max_retries, timeout, metadata,
                               idempotency_key, on_duplicate)
            try:
                future = await builder.execute()
            except rq.DuplicateActivityError as exc:
                raise Fail(str(exc)) from None
            except rq.InvalidActivityError as exc:
                raise BadInput(str(exc)) from None
            err.print(f"queue {name!r}" + ("" if why is None else f" ({why})"))
            if wait is None:
                return future.activity_id, future.created, None
            click.echo(future.activity_id)
            try:
                value = await future.result(timeout=wait)
            except TimeoutError:
                raise Fail(f"activity {future.activity_id} did not finish within {wait} s") from None
            except (rq.ActivityFailed, rq.ActivityCancelled) as exc:
                raise Fail(str(exc)) from None
            return future.activity_id, future.created, value
        finally:
            await backend.close()

    activity_id, created, value = run(go())
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
    priority: rq.Priority | None,
    delay: float,
    max_retries: int | None,
    timeout: float | None,
    metadata: dict[str, str] | None,
    idempotency_key: str | None,
    on_duplicate: str,
) -> rq.ActivityBuilder:
    b = executor.activity(activity_type).payload(payload).delay(delay)
    if priority is not None:
        b = b.priority(priority)
    if max_retries is not None:
        b = b.max_retries(max_retries)
    if timeout is not None:
        b = b.timeout(timeout)
    if metadata is not None:
        b = b.metadata(metadata)
    if idempotency_key is not None:
        b = b.idempotency_key(idempotency_key, rq.OnDuplicate[on_duplicate.upper()])
    return b


@click.command()
@click.argument("activity_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@backend_option
@log_level_option("warning")
def inspect(activity_id: str, as_json: bool, backend_url: str | None, log_level: str) -> None:
    """Show one activity, its events and its result."""
    configure_logging(log_level)
    url = require_backend(backend_url)

    async def go() -> tuple[rq.ActivitySnapshot | None, list[rq.ActivityEvent], rq.ActivityResult | None]:
        backend = await open_store(url, read_only=True)
        try:
            snap = await backend.get_activity(activity_id)
            if snap is None:
                return None, [], None
            return snap, await backend.get_events(activity_id), await backend.get_result(activity_id)
        finally:
            await backend.close()

    snap, events, result = run(go())
    if snap is None:
        raise Fail(f"no activity {activity_id!r}")
    if as_json:
        doc = {
            "activity": {**msgspec.structs.asdict(snap), "payload": json_value(snap.payload),
                         "progress": json_value(snap.progress)},
            "events": [msgspec.structs.asdict(e) for e in events],
            "result": None if result is None else {**msgspec.structs.asdict(result), "data": json_value(result.data)},
        }
        click.echo(msgspec.json.encode(doc).decode())
        return
    table = Table(title=f"activity {activity_id}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for field, value in msgspec.structs.asdict(snap).items():
        if field == "traceback":
            continue  # printed below the table, as Python prints it
        if field in ("payload", "progress"):
            shown = json_text(value)
        elif field == "metadata":
            shown = msgspec.json.encode(value).decode()
        else:
            shown = _fmt(value, field)
        table.add_row(field, shown)
    out.print(table)
    if snap.traceback is not None:
        out.print("traceback (the last attempt whose handler raised):", style="bold")
        out.print(snap.traceback.rstrip("\n"), markup=False, highlight=False, soft_wrap=True)
    ev = Table(title="events")
    for col in ("id", "at", "event", "detail", "traceback"):
        ev.add_column(col)
    attempt = 0  # the attempt an event belongs to: the claims seen so far
    failed: list[tuple[rq.ActivityEvent, int]] = []  # the events of failed attempts with their traceback
    for e in events:
        if e.event_type == "claimed":
            attempt += 1
        if e.traceback is not None:
            failed.append((e, attempt))
        ev.add_row(str(e.id), _fmt(e.at_ms, "at_ms"), e.event_type, e.detail or "",
                   f"attempt {attempt}, below" if e.traceback is not None else "")
    out.print(ev)
    for e, n in failed:
        out.print(f"traceback of attempt {n} (event {e.id}, {e.event_type}):", style="bold")
        if e is failed[-1][0] and e.traceback == snap.traceback:
            out.print("(the last attempt's, printed above)")
        else:
            out.print((e.traceback or "").rstrip("\n"), markup=False, highlight=False, soft_wrap=True)
    if result is None:
        out.print("result: (not finished)")
    else:
        out.print(f"result: {result.status}  data={json_text(result.data)}  error={result.error}")


def _fmt(value: Any, field: str) -> str:
    if value is None:
        return "-"
    if field.endswith("_ms") and isinstance(value, int) and value > 10**11:
        return datetime.fromtimestamp(value / 1000, UTC).isoformat(timespec="milliseconds")
    return str(value)


# ------------------------------------------------------------------ actions
F = TypeVar("F", bound=Callable[..., Any])


def filter_options(fn: F) -> F:
    """The options that select activities, shared by every action command."""
    options = [
        click.argument("activity_ids", metavar="[ID]...", nargs=-1),
        click.option("--status", "statuses", multiple=True, metavar="STATUS",
                     help="Only activities in STATUS (repeatable): pending, scheduled, processing, retrying, "
                          "completed, failed, dead_letter, cancelled."),
        click.option("--type", "types", multiple=True, metavar="TYPE", help="Only activities of TYPE (repeatable)."),
        click.option("--priority", "priorities", multiple=True, type=PriorityType(),
                     help="Only activities of this priority (repeatable): low|normal|high|critical or 1-4."),
        click.option("--created-after", metavar="TIME",
                     help="Created at or after TIME: ISO 8601 with a time zone, or epoch milliseconds."),
        click.option("--created-before", metavar="TIME", help="Created before TIME (as --created-after)."),
        click.option("--metadata", "metadata_pairs", multiple=True, metavar="KEY=VALUE",
                     help="Only activities whose metadata has KEY=VALUE (repeatable; all must match)."),
        click.option("--parent", metavar="ID", help="Only children of activity ID."),
        click.option("--all", "select_all", is_flag=True,
                     help="With no ID and no filter option: act on every activity of the queue."),
        click.option("--limit", type=int, default=10_000, show_default=True,
                     help="Change at most this many activities (newest first)."),
        click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
        queue_option,
        backend_option,
        log_level_option("warning"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _time_ms(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    value = text.strip()
    if value.isdigit():
        return int(value)
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BadInput(f"{what} {text!r} is neither ISO 8601 (with a time zone) nor epoch milliseconds") from None
    if when.tzinfo is None:
        raise BadInput(f"{what} {text!r} has no time zone; add one, e.g. {value}Z or {value}+02:00")
    return int(when.timestamp() * 1000)


def build_filter(
    activity_ids: tuple[str, ...],
    statuses: tuple[str, ...],
    types: tuple[str, ...],
    priorities: tuple[rq.Priority, ...],
    created_after: str | None,
    created_before: str | None,
    metadata_pairs: tuple[str, ...],
    parent: str | None,
    select_all: bool,
) -> rq.ActivityFilter:
    """The :class:`~runnerq_fast.ActivityFilter` the options describe, validated (:class:`BadInput` if not)."""
    pairs: list[tuple[str, str]] = []
    for item in metadata_pairs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadInput(f"--metadata {item!r} is not KEY=VALUE")
        pairs.append((key, value))
    flt = rq.ActivityFilter(
        ids=activity_ids or None,
        statuses=statuses or None,
        activity_types=types or None,
        priorities=tuple(int(p) for p in priorities) or None,
        created_after_ms=_time_ms(created_after, "--created-after"),
        created_before_ms=_time_ms(created_before, "--created-before"),
        metadata=tuple(pairs),
        parent_id=parent,
    )
    if flt == rq.ActivityFilter() and not select_all:
        raise BadInput("give activity IDs or a filter option (--status, --type, ...), or --all for the whole queue")
    try:
        return filters.check_filter(flt)
    except rq.InvalidActivityError as exc:
        raise BadInput(str(exc)) from None


_DONE = {"retry": "retried", "cancel": "cancelled", "run_now": "made ready", "set_priority": "re-prioritised",
         "delete": "deleted"}


def _act(
    name: str,
    call: Callable[[rq.QueueAdmin, rq.ActivityFilter, int], Awaitable[rq.ActionResult]],
    flt: rq.ActivityFilter,
    limit: int,
    queue: str | None,
    as_json: bool,
    backend_url: str | None,
    log_level: str,
) -> None:
    configure_logging(log_level)
    if not 1 <= limit <= filters.MAX_ACTION_LIMIT:
        raise BadInput(f"--limit must be within 1-{filters.MAX_ACTION_LIMIT}, got {limit}")
    url = require_backend(backend_url)

    async def go() -> tuple[str, rq.ActionResult, list[str]]:
        backend = await open_store(url)
        try:
            name, why = await resolve_queue(backend, queue)
            if why is not None:
                err.print(f"queue {name!r} ({why})")
            res = await call(rq.QueueAdmin(backend, name), flt, limit)
            # ids the action neither changed nor skipped may simply not exist: say which, not "changed 0"
            missing = []
            for aid in flt.ids or ():
                if aid not in res.changed:
                    snap = await backend.get_activity(aid)
                    if snap is None or snap.queue != name:
                        missing.append(aid)
            return name, res, missing
        except rq.InvalidActivityError as exc:
            raise BadInput(str(exc)) from None
        finally:
            await backend.close()

    queue, result, missing = run(go())
    if as_json:
        click.echo(msgspec.json.encode(result).decode())
    else:
        click.echo(f"{_DONE[name]} {len(result.changed)}, skipped {result.skipped} (not in a state {name} "
                   "applies to)")
        for aid in result.changed:
            click.echo(aid)
    if missing:
        raise Fail(f"no activity {', '.join(map(repr, missing))} in queue {queue!r}")


@click.command()
@filter_options
def cancel(activity_ids: tuple[str, ...], statuses: tuple[str, ...], types: tuple[str, ...],
           priorities: tuple[rq.Priority, ...], created_after: str | None, created_before: str | None,
           metadata_pairs: tuple[str, ...], parent: str | None, select_all: bool, limit: int, as_json: bool,
           queue: str | None, backend_url: str | None, log_level: str) -> None:
    """Cancel activities: by ID, or every one the filter options match.

    Pending, scheduled and retrying ones end cancelled at once; a running one is
    asked to stop and ends cancelled after its engine's next lease heartbeat.
    Prints how many changed and their ids; bad input exits 2 and changes nothing.
    """
    flt = build_filter(activity_ids, statuses, types, priorities, created_after, created_before, metadata_pairs,
                       parent, select_all)
    _act("cancel", lambda adm, f, n: adm.cancel(flt=f, limit=n), flt, limit, queue, as_json, backend_url, log_level)


@click.command()
@filter_options
def retry(activity_ids: tuple[str, ...], statuses: tuple[str, ...], types: tuple[str, ...],
          priorities: tuple[rq.Priority, ...], created_after: str | None, created_before: str | None,
          metadata_pairs: tuple[str, ...], parent: str | None, select_all: bool, limit: int, as_json: bool,
          queue: str | None, backend_url: str | None, log_level: str) -> None:
    """Put failed, dead-lettered and cancelled activities back to pending (retries counted from 0).

    By ID, or every one the filter options match; their earlier errors stay in their events.
    """
    flt = build_filter(activity_ids, statuses, types, priorities, created_after, created_before, metadata_pairs,
                       parent, select_all)
    _act("retry", lambda adm, f, n: adm.retry(flt=f, limit=n), flt, limit, queue, as_json, backend_url, log_level)


@click.command(name="run-now")
@filter_options
def run_now(activity_ids: tuple[str, ...], statuses: tuple[str, ...], types: tuple[str, ...],
            priorities: tuple[rq.Priority, ...], created_after: str | None, created_before: str | None,
            metadata_pairs: tuple[str, ...], parent: str | None, select_all: bool, limit: int, as_json: bool,
            queue: str | None, backend_url: str | None, log_level: str) -> None:
    """Make scheduled and retrying activities ready now: by ID, or every one the filter options match."""
    flt = build_filter(activity_ids, statuses, types, priorities, created_after, created_before, metadata_pairs,
                       parent, select_all)
    _act("run_now", lambda adm, f, n: adm.run_now(flt=f, limit=n), flt, limit, queue, as_json, backend_url,
         log_level)


@click.command()
@filter_options
def delete(activity_ids: tuple[str, ...], statuses: tuple[str, ...], types: tuple[str, ...],
           priorities: tuple[rq.Priority, ...], created_after: str | None, created_before: str | None,
           metadata_pairs: tuple[str, ...], parent: str | None, select_all: bool, limit: int, as_json: bool,
           queue: str | None, backend_url: str | None, log_level: str) -> None:
    """Delete finished activities (completed, failed, dead_letter, cancelled) with their events.

    By ID, or every one the filter options match; activities not finished are skipped.
    """
    flt = build_filter(activity_ids, statuses, types, priorities, created_after, created_before, metadata_pairs,
                       parent, select_all)
    _act("delete", lambda adm, f, n: adm.delete(flt=f, limit=n), flt, limit, queue, as_json, backend_url, log_level)


@click.command(name="set-priority")
@click.argument("new_priority", metavar="PRIORITY", type=PriorityType())
@filter_options
def set_priority(new_priority: rq.Priority, activity_ids: tuple[str, ...], statuses: tuple[str, ...],
                 types: tuple[str, ...], priorities: tuple[rq.Priority, ...], created_after: str | None,
                 created_before: str | None, metadata_pairs: tuple[str, ...], parent: str | None,
                 select_all: bool, limit: int, as_json: bool, queue: str | None, backend_url: str | None,
                 log_level: str) -> None:
    """Give activities that have not started PRIORITY (low|normal|high|critical or 1-4).

    By ID, or every one the filter options match; the claim order follows at once.
    """
    flt = build_filter(activity_ids, statuses, types, priorities, created_after, created_before, metadata_pairs,
                       parent, select_all)
    _act("set_priority", lambda adm, f, n: adm.set_priority(int(new_priority), flt=f, limit=n), flt, limit, queue,
         as_json, backend_url, log_level)
