"""Prune rate, and the drain rate while a prune runs, per backend, in one interleaved run.

::

    .venv/bin/python benchmarks/retention.py -n 20000 --finished 50000 --rounds 3 --output-json retention.json

Per backend (``--backends``: memory, sqlite, postgresql, redis) a fresh store
(a fresh PostgreSQL database, dropped afterwards; a private ``redis-server``
this script starts; a temporary SQLite file). Each round, for each backend:

1. ``drain alone``: ``-n`` no-op activities enqueued, then drained by one
   engine (default configuration, its own pruner off) — activities per second
   from the engine's start until the last handler ran and its ack was flushed;
2. ``prune alone``: ``--finished`` completed activities (written through the
   backend: enqueue, claim, ack in batches of 1,000) pruned by
   :func:`runnerq_fast.prune` (``older_than=0``, batches of ``--batch-size``) —
   activities deleted per second;
3. ``drain while pruning``: the same two at once (the fill first, then the
   drain and the prune started together); both rates.

The order within a round alternates (even rounds drain first), so a change in
the machine's load hits both. Prints the medians and ranges; the machine's
1-minute load average is recorded per round. Nothing here is an assertion.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _services import PgDatabases, PrivateRedis

import runnerq_fast as rq
from runnerq_fast.engine import run_with_uvloop
from runnerq_fast.ids import new_activity_id
from runnerq_fast.models import Ack, AckOutcome, NewActivity

BACKENDS = ("memory", "sqlite", "postgresql", "redis")
QUEUE = "retbench"


async def fill_finished(backend: rq.Backend, n: int) -> None:
    """``n`` completed no-op activities, through the backend (enqueue, claim, ack in batches of 1,000)."""
    for start in range(0, n, 1000):
        k = min(1000, n - start)
        await backend.enqueue(QUEUE, [NewActivity(id=new_activity_id(), activity_type="old", payload=b"{}")
                                      for _ in range(k)])
        claimed = await backend.claim(QUEUE, "filler", k, ["old"], 600_000)
        await backend.ack(QUEUE, [Ack(c.id, c.claim_token, int(AckOutcome.COMPLETED), b"null") for c in claimed])


async def enqueue_work(backend: rq.Backend, n: int) -> None:
    for start in range(0, n, 1000):
        await backend.enqueue(QUEUE, [NewActivity(id=new_activity_id(), activity_type="noop", payload=b"{}")
                                      for _ in range(min(1000, n - start))])


async def drain(backend: rq.Backend, n: int) -> float:
    """Seconds one engine takes to complete the ``n`` pending no-ops."""
    engine = rq.WorkerEngine(backend, queue_name=QUEUE, prune_interval=0)
    ran = 0
    done = asyncio.Event()

    @engine.activity("noop")
    async def noop(payload: Any, ctx: rq.ActivityContext) -> None:
        nonlocal ran
        ran += 1
        if ran == n:
            done.set()

    t0 = time.perf_counter()
    async with engine:
        await done.wait()  # (the completed count cannot tell: a prune running meanwhile lowers it)
    return time.perf_counter() - t0  # leaving the engine flushed the last acks


async def prune_all(backend: rq.Backend, batch_size: int) -> tuple[int, float]:
    report = await rq.prune(backend, QUEUE, older_than=0, statuses=["completed"], batch_size=batch_size)
    return report.activities, report.seconds


async def one_round(url: str, n: int, finished: int, batch_size: int, drain_first: bool,
                    options: dict[str, Any]) -> dict[str, Any]:
    backend = await rq.connect(url, **options)
    try:
        out: dict[str, Any] = {"load_1m": round(os.getloadavg()[0], 2)}

        async def alone_drain() -> None:
            await enqueue_work(backend, n)
            out["drain_alone"] = n / await drain(backend, n)
            await rq.prune(backend, QUEUE, older_than=0, batch_size=batch_size)  # drop the drained ones

        async def alone_prune() -> None:
            await fill_finished(backend, finished)
            deleted, seconds = await prune_all(backend, batch_size)
            out["prune_alone"] = deleted / seconds

        for step in ((alone_drain, alone_prune) if drain_first else (alone_prune, alone_drain)):
            await step()
        await fill_finished(backend, finished)
        await enqueue_work(backend, n)
        pruned = asyncio.create_task(prune_all(backend, batch_size))
        out["drain_while_pruning"] = n / await drain(backend, n)
        deleted, seconds = await pruned
        out["prune_while_draining"] = deleted / seconds
        await rq.prune(backend, QUEUE, older_than=0, batch_size=batch_size)
        return out
    finally:
        await backend.close()


@contextlib.contextmanager
def stores(names: list[str], pg_admin: str) -> Iterator[dict[str, tuple[str, dict[str, Any]]]]:
    with contextlib.ExitStack() as stack:
        urls: dict[str, tuple[str, dict[str, Any]]] = {}
        for name in names:
            if name == "memory":
                urls[name] = ("memory://", {})
            elif name == "sqlite":
                tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="rq-retbench-"))
                urls[name] = (f"sqlite:///{tmp}/ret.db", {})
            elif name == "postgresql":
                dbs = stack.enter_context(PgDatabases(pg_admin))
                urls[name] = (dbs.create("retention"), {})
            elif name == "redis":
                redis = stack.enter_context(PrivateRedis())
                urls[name] = (redis.url(), {"namespace": f"rqret{uuid.uuid4().hex[:8]}"})
        yield urls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20_000, help="no-op activities drained per run (default 20,000)")
    parser.add_argument("--finished", type=int, default=50_000, help="finished activities pruned per run")
    parser.add_argument("--batch-size", type=int, default=1000, help="prune batch size (default 1,000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--pg-admin", default=os.environ.get("RUNNERQ_TEST_PG",
                                                            "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--output-json", type=Path, metavar="FILE")
    args = parser.parse_args()
    names = [b for b in args.backends.split(",") if b]
    results: dict[str, list[dict[str, Any]]] = {b: [] for b in names}
    with stores(names, args.pg_admin) as urls:
        for r in range(args.rounds):
            for name in names:
                url, options = urls[name]
                box: list[dict[str, Any]] = []

                async def go(url: str = url, options: dict[str, Any] = options,
                             box: list[dict[str, Any]] = box, drain_first: bool = r % 2 == 0) -> None:
                    box.append(await one_round(url, args.n, args.finished, args.batch_size, drain_first, options))

                run_with_uvloop(go())
                results[name].append(box[0])
                print(f"round {r + 1} {name}: " + ", ".join(f"{k} {v:,.0f}" for k, v in box[0].items()),
                      file=sys.stderr, flush=True)
    keys = ("drain_alone", "drain_while_pruning", "prune_alone", "prune_while_draining")
    print(f"\n{'backend':<11} | " + " | ".join(f"{k + ' /s':>26}" for k in keys) + " | drain ratio")
    for name, runs in results.items():
        cells = []
        for k in keys:
            values = [run[k] for run in runs]
            cells.append(f"{statistics.median(values):>9,.0f} ({min(values):,.0f}-{max(values):,.0f})".rjust(26))
        ratios = [run["drain_while_pruning"] / run["drain_alone"] for run in runs]
        print(f"{name:<11} | " + " | ".join(cells) + f" | {statistics.median(ratios):.2f} "
              f"({min(ratios):.2f}-{max(ratios):.2f})")
    if args.output_json:
        args.output_json.write_text(msgspec.json.encode({"args": vars(args) | {"output_json": None},
                                                         "results": results}).decode())


if __name__ == "__main__":
    main()
