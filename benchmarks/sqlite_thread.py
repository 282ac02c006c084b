"""The SQLite connection thread's work per drained activity: CPU time from /proc, or instructions under callgrind.

::

    .venv/bin/python benchmarks/sqlite_thread.py prep /tmp/d.db -n 10000     # enqueue (not measured)
    .venv/bin/python benchmarks/sqlite_thread.py drain /tmp/d.db -n 10000    # drain; thread CPU per activity
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=/tmp/cg.%p \\
        .venv/bin/python benchmarks/sqlite_thread.py drain /tmp/d.db -n 10000
    grep -m1 summary /tmp/cg.<pid>-02     # the SQLite thread: instructions / n = per activity

``prep`` enqueues ``-n`` no-op activities (batches of 500) on queue ``sqlite-thread`` of a new
file; ``drain`` opens it in another process and drains them with ONE default
:class:`~runnerq_fast.WorkerEngine` (one connection thread, synchronous=FULL, events and results
recorded), so a callgrind run of ``drain`` counts no enqueue: the thread's file (``-02``) holds
the open (a few million instructions) and the drain. The CPU time (utime + stime of that thread,
clock ticks) moves with the machine's load less than the drain rate does; the instruction count
does not move with it, though under callgrind the drain lasts a minute and heartbeats renew
leases meanwhile (a little work a real drain does not do). Run each tree with its own
``PYTHONPATH`` and its own file (a file migrated by one tree may not suit the other).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time

import runnerq_fast as rq
from runnerq_fast.engine.engine import run_with_uvloop

QUEUE = "sqlite-thread"


def thread_cpu() -> float:
    """CPU seconds of the backend's connection thread (0 if there is none)."""
    for t in threading.enumerate():
        if t.name.startswith("runnerq-sqlite") and t.native_id is not None:
            with open(f"/proc/self/task/{t.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


async def run(mode: str, path: str, n: int) -> None:
    if mode == "prep":
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
    backend = await rq.connect(f"sqlite:///{os.path.abspath(path)}")
    try:
        engine = rq.WorkerEngine(backend, queue_name=QUEUE)
        done = asyncio.Event()
        ran = 0

        @engine.activity("noop")
        async def noop(payload: object, ctx: rq.ActivityContext) -> None:
            nonlocal ran
            ran += 1
            if ran >= n:
                done.set()

        if mode == "prep":
            batch = [("noop", None)] * 500
            for start in range(0, n, 500):
                await engine.executor.enqueue_many(batch[: min(500, n - start)])
            return
        cpu0, t0 = thread_cpu(), time.perf_counter()
        await engine.start()
        await done.wait()
        while engine.in_flight:  # done once every ack is flushed
            await asyncio.sleep(0.0005)
        seconds, cpu = time.perf_counter() - t0, thread_cpu() - cpu0
        await engine.stop()
        print(f"drained {n} in {seconds:.3f} s ({n / seconds:,.0f}/s); "
              f"SQLite thread CPU {cpu / n * 1e6:.1f} us per activity")
    finally:
        await backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("mode", choices=["prep", "drain"])
    parser.add_argument("path", help="SQLite file (prep replaces it)")
    parser.add_argument("-n", type=int, default=10_000, help="activities (default 10000)")
    args = parser.parse_args()
    run_with_uvloop(run(args.mode, args.path, args.n))


if __name__ == "__main__":
    main()
