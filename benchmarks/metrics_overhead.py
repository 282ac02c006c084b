"""The engine's per-activity cost with PrometheusMetrics on vs off, measured side by side in one run.

::

    .venv/bin/python benchmarks/metrics_overhead.py memory:// -n 50000 --rounds 5 --output-json overhead.json

Each round drains ``-n`` no-op activities twice on fresh queues of the same
backend, once with ``metrics=None`` and once with ``metrics=PrometheusMetrics()``
(the order alternates between rounds), each with ONE engine in the default
configuration, timed from ``engine.start()`` until every activity's ack is
flushed. The handler counts completions; the metrics run also scrapes the
sink once at the end (what a Prometheus server would do) and checks that it
counted every activity. The report gives the per-activity cost (CPU-process
time and wall time) of each, the overhead ``on / off - 1`` per round and as
the median over rounds, and the ratio of each side's best run (the one least
disturbed by other work on a shared machine). ``memory://`` shows the engine's own cost best;
other backends add their round trips to both sides.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
import uuid
from typing import Any

import runnerq_fast as rq
from runnerq_fast.engine import run_with_uvloop
from runnerq_fast.metrics import ACTIVITIES_COMPLETED


async def drain(url: str, n: int, metrics: rq.PrometheusMetrics | None) -> dict[str, float]:
    """Enqueue ``n`` no-ops on a fresh queue and drain them with one engine; seconds per activity."""
    backend = await rq.connect(url)
    queue = f"overhead-{uuid.uuid4().hex[:8]}"
    try:
        engine = rq.WorkerEngine(backend, queue_name=queue, metrics=metrics)
        done = 0
        finished = asyncio.Event()

        @engine.activity("noop")
        async def noop(payload: Any, ctx: rq.ActivityContext) -> None:
            nonlocal done
            done += 1
            if done == n:
                finished.set()

        ex = engine.executor
        for start in range(0, n, 1000):
            await ex.enqueue_many([("noop", None)] * min(1000, n - start))
        gc.collect()  # the previous run's garbage must not be collected during this one
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await engine.start()
        await asyncio.wait_for(finished.wait(), 600)
        await engine.stop()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        if metrics is not None:
            from prometheus_client import CollectorRegistry, generate_latest

            registry = CollectorRegistry()
            registry.register(metrics)
            generate_latest(registry)
            counted = metrics.value(ACTIVITIES_COMPLETED, (queue, "noop"))
            if counted != n:
                raise RuntimeError(f"the sink counted {counted} completions of {n}")
        return {"cpu_us_per_activity": cpu / n * 1e6, "wall_us_per_activity": wall / n * 1e6}
    finally:
        await backend.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url", nargs="?", default="memory://")
    ap.add_argument("-n", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--output-json")
    args = ap.parse_args()
    rounds: list[dict[str, Any]] = []

    async def go() -> None:
        await drain(args.url, min(args.n, 5000), None)  # warm-up (imports, caches)
        for i in range(args.rounds):
            order = ("off", "on") if i % 2 == 0 else ("on", "off")
            r: dict[str, Any] = {}
            for side in order:
                r[side] = await drain(args.url, args.n, rq.PrometheusMetrics() if side == "on" else None)
            r["overhead_cpu"] = r["on"]["cpu_us_per_activity"] / r["off"]["cpu_us_per_activity"] - 1
            r["overhead_wall"] = r["on"]["wall_us_per_activity"] / r["off"]["wall_us_per_activity"] - 1
            rounds.append(r)
            print(f"round {i + 1}: off {r['off']['cpu_us_per_activity']:.2f} us/act CPU "
                  f"({r['off']['wall_us_per_activity']:.2f} wall), on {r['on']['cpu_us_per_activity']:.2f} "
                  f"({r['on']['wall_us_per_activity']:.2f} wall): overhead {r['overhead_cpu'] * 100:+.1f} % CPU, "
                  f"{r['overhead_wall'] * 100:+.1f} % wall")

    run_with_uvloop(go())
    med_cpu = statistics.median(r["overhead_cpu"] for r in rounds)
    med_wall = statistics.median(r["overhead_wall"] for r in rounds)
    # the best run of each side is the one least disturbed by other work on the machine
    best = {side: min(r[side]["cpu_us_per_activity"] for r in rounds) for side in ("off", "on")}
    best_overhead = best["on"] / best["off"] - 1
    print(f"median overhead over {len(rounds)} rounds: {med_cpu * 100:+.1f} % CPU, {med_wall * 100:+.1f} % wall; "
          f"best runs: off {best['off']:.2f} us/act, on {best['on']:.2f} us/act CPU = {best_overhead * 100:+.1f} % "
          f"(speedups.enabled={rq.speedups.enabled})")
    if args.output_json:
        with open(args.output_json, "w") as fh:
            json.dump({"argv": sys.argv, "url": args.url, "n": args.n, "speedups": rq.speedups.enabled,
                       "rounds": rounds, "median_overhead_cpu": med_cpu, "median_overhead_wall": med_wall,
                       "best_cpu_us_per_activity": best, "best_overhead_cpu": best_overhead}, fh,
                      indent=2)


if __name__ == "__main__":
    main()
