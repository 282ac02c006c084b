"""Instructions per drained activity of one engine, counted by callgrind: a figure the machine's load does not move.

::

    valgrind --tool=callgrind --dump-before=getppid --callgrind-out-file=/tmp/cg.%p \
        .venv/bin/python benchmarks/callgrind_drain.py -n 20000 memory://
    grep -m1 summary /tmp/cg.<pid>.2          # the drain: instructions / n = per activity
    PYTHONPATH=/path/to/other/checkout valgrind ... benchmarks/callgrind_drain.py ...   # the other tree

Enqueues ``-n`` no-op activities (batches of 500) on a fresh queue, then
drains them with ONE :class:`~runnerq_fast.WorkerEngine` in its default
configuration, from :meth:`~runnerq_fast.WorkerEngine.start` until the last
ack is flushed, as ``runnerq-fast bench`` times it. The process calls
:func:`os.getppid` just before the engine starts and just after the last ack
lands and calls it nowhere else, so with ``--dump-before=getppid`` callgrind
writes the start-up and the enqueue to part 1, the drain to part 2 and the
stop to the main file. On ``postgresql://`` or ``redis://`` URLs only the
client is counted (run the server under callgrind for its side); its waits
are not instructions, so the count stays comparable between runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import runnerq_fast as rq
from runnerq_fast.engine.engine import run_with_uvloop


async def drain(url: str, n: int) -> float:
    """Enqueue and drain ``n`` no-op activities on ``url``; return the drain's wall time in seconds."""
    backend = await rq.connect(url)
    try:
        engine = rq.WorkerEngine(backend, queue_name=f"callgrind-{os.urandom(4).hex()}")
        done = asyncio.Event()
        ran = 0

        @engine.activity("noop")
        async def noop(payload: object, ctx: rq.ActivityContext) -> None:
            nonlocal ran
            ran += 1
            if ran >= n:
                done.set()

        batch = [("noop", None)] * 500
        for start in range(0, n, 500):
            await engine.executor.enqueue_many(batch[: min(500, n - start)])
        os.getppid()  # callgrind: part 2 starts here
        t0 = time.perf_counter()
        await engine.start()
        await done.wait()
        while engine.in_flight:  # done once every ack is flushed
            await asyncio.sleep(0.0005)
        seconds = time.perf_counter() - t0
        os.getppid()  # callgrind: part 2 ends here
        await engine.stop()
        return seconds
    finally:
        await backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default="memory://", help="backend URL (default memory://)")
    parser.add_argument("-n", type=int, default=20_000, help="activities (default 20000)")
    args = parser.parse_args()
    result: list[float] = []

    async def run() -> None:
        result.append(await drain(args.url, args.n))

    run_with_uvloop(run())
    print(f"drained {args.n} in {result[0]:.3f} s ({args.n / result[0]:,.0f}/s; under callgrind: not a rate)")


if __name__ == "__main__":
    main()
