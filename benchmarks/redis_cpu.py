"""Server CPU per activity of the Redis hot-path scripts (enqueue, claim, ack), per phase.

::

    redis-server --port 6392 --save '' --appendonly no --daemonize yes
    .venv/bin/python benchmarks/redis_cpu.py --port 6392      # this checkout
    PYTHONPATH=/path/to/other/checkout .venv/bin/python benchmarks/redis_cpu.py --port 6392
    redis-cli -p 6392 shutdown nosave

Wall-clock drain rates swing by 2x on a shared machine; the CPU the Redis
server itself spends (``INFO cpu``: user + sys) per activity is steadier. Each
pass enqueues ``-n`` no-op activities (batches of 500), claims them (batches
of 100) and acks them completed (batches of 100) on a fresh queue, reading the
server's CPU time around each phase; the lowest of ``--passes`` passes is
reported, in microseconds per activity. Use a private server: every command
on it counts. Compare two checkouts by running them alternately, several
times each.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid

import redis

import runnerq_fast as rq
from runnerq_fast.ids import new_activity_id
from runnerq_fast.models import Ack, AckOutcome, ClaimedActivity, NewActivity


def _cpu(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def _pass(r: redis.Redis, backend: rq.Backend, queue: str, n: int) -> dict[str, float]:
    items = [NewActivity(id=new_activity_id(), activity_type="noop", payload=b"{}") for _ in range(n)]
    out: dict[str, float] = {}
    t = _cpu(r)
    for i in range(0, n, 500):
        await backend.enqueue(queue, items[i : i + 500])
    out["enqueue"] = _cpu(r) - t
    claimed: list[ClaimedActivity] = []
    t = _cpu(r)
    while len(claimed) < n:
        claimed += await backend.claim(queue, "w", 100, None, 600_000)
    out["claim"] = _cpu(r) - t
    t = _cpu(r)
    for i in range(0, n, 100):
        await backend.ack(
            queue, [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, b"null") for c in claimed[i : i + 100]]
        )
    out["ack"] = _cpu(r) - t
    return out


async def _main(port: int, n: int, passes: int) -> None:
    r = redis.Redis(port=port)
    backend = await rq.connect(f"redis://127.0.0.1:{port}/0", namespace=f"rqcpu{uuid.uuid4().hex[:8]}")
    try:
        runs = [await _pass(r, backend, f"cpu-{i}", n) for i in range(passes)]
    finally:
        await backend.close()
        r.close()
    best = {k: min(run[k] for run in runs) * 1e6 / n for k in runs[0]}
    print(
        " ".join(f"{k} {v:.2f} us" for k, v in best.items())
        + f" | claim+ack {best['claim'] + best['ack']:.2f} us (server CPU per activity, lowest of {passes})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True, help="port of a private Redis on 127.0.0.1")
    parser.add_argument("-n", type=int, default=20_000, help="activities per pass (default 20,000)")
    parser.add_argument("--passes", type=int, default=5, help="passes; the lowest is reported (default 5)")
    args = parser.parse_args()
    asyncio.run(_main(args.port, args.n, args.passes))


if __name__ == "__main__":
    main()
