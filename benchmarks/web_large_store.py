"""Request latency of the read routes on a large store: ``-n`` activities, most of them finished.

::

    .venv/bin/python benchmarks/web_large_store.py sqlite:////tmp/big.db -n 1000000 --output-json big.json

Fills a fresh ``big-<random>`` queue of each backend with ``-n`` activities
of 5 types and 2 tenants (``enqueue`` in batches of 10,000, then claims and
acks in batches of 5,000 straight through the backend: 90 % completed, 5 %
failed, 5 % left pending), then times each listing, count, summary and
detail request through the app (httpx's ASGI transport: the backend's query
plus the app, no socket) ``--repeat`` times and reports the median and the
worst in milliseconds. SQL rows are left in place (use a fresh database or
file); on Redis the queue's keys are deleted afterwards. Nothing here is an assertion: the store-level proof
that no request reads all finished rows is the EXPLAIN test of each backend.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from typing import Any

import httpx

import runnerq_fast as rq
from runnerq_fast.engine import run_with_uvloop
from runnerq_fast.models import Ack, AckOutcome, NewActivity
from runnerq_fast.web import create_app

TYPES = ("email", "sms", "push", "charge", "report")


async def fill(backend: rq.Backend, queue: str, n: int) -> str:
    """``n`` activities: 90 % completed, 5 % failed, 5 % pending; returns the id of one completed."""
    ex = rq.ActivityExecutor(backend, queue)
    t0 = time.perf_counter()
    for start in range(0, n, 10_000):
        items: list[NewActivity] = []
        for i in range(start, min(n, start + 10_000)):
            b = ex.activity(TYPES[i % 5]).payload({"i": i}).priority(1 + i % 4)
            items.append(b.metadata({"tenant": "t1" if i % 2 else "t2"}).build())
        await backend.enqueue(queue, items)
    t1 = time.perf_counter()
    finish = n - n // 20
    done = 0
    sample = ""
    while done < finish:
        claimed = await backend.claim(queue, "filler", min(5000, finish - done), None, 600_000)
        if not claimed:
            break
        acks = []
        for k, a in enumerate(claimed):
            failed = (done + k) % 19 == 0
            acks.append(Ack(a.id, a.claim_token, int(AckOutcome.FAILED if failed else AckOutcome.COMPLETED),
                            None if failed else b"1", "boom" if failed else None))
        await backend.ack(queue, acks)
        sample = sample or claimed[-1].id
        done += len(claimed)
    print(f"  filled {n} in {t1 - t0:.0f} s + finished {done} in {time.perf_counter() - t1:.0f} s", flush=True)
    return sample


async def measure(url: str, n: int, repeat: int) -> dict[str, Any]:
    backend = await rq.connect(url)
    queue = f"big-{uuid.uuid4().hex[:8]}"
    try:
        some_id = await fill(backend, queue, n)
        base = f"/api/v1/queues/{queue}"
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(backend)),
                                     base_url="http://bench", timeout=60) as c:
            first = (await c.get(f"{base}/activities", params={"limit": 50})).json()
            deep = first["next_cursor"]
            for _ in range(20):  # 20 pages in
                deep = (await c.get(f"{base}/activities", params={"limit": 50, "cursor": deep})).json()["next_cursor"]
            routes: dict[str, tuple[str, dict[str, Any]]] = {
                "queues": ("/api/v1/queues", {}),
                "list newest": (f"{base}/activities", {"limit": 50}),
                "list page 21": (f"{base}/activities", {"limit": 50, "cursor": deep}),
                "list pending": (f"{base}/activities", {"status": "pending", "limit": 50}),
                "list failed, one type": (f"{base}/activities", {"status": "failed", "type": "sms", "limit": 50}),
                "list metadata+priority": (f"{base}/activities", {"status": "pending", "metadata": "tenant=t1",
                                                                  "priority": "4", "limit": 50}),
                "list oldest first": (f"{base}/activities", {"order": "oldest", "limit": 50}),
                "count pending": (f"{base}/activities/count", {"status": "pending"}),
                "count all (cap 10k)": (f"{base}/activities/count", {}),
                "detail": (f"{base}/activities/{some_id}", {}),
                "runnerq stats": ("/api/observability/stats", {"queue": queue}),
                "runnerq pending": ("/api/observability/activities/pending", {"queue": queue}),
                "runnerq dead-letter": ("/api/observability/dead-letter", {"queue": queue}),
            }
            out: dict[str, Any] = {}
            for name, (path, params) in routes.items():
                times = []
                for _ in range(repeat):
                    t = time.perf_counter()
                    r = await c.get(path, params=params)
                    times.append((time.perf_counter() - t) * 1000)
                    if r.status_code != 200:
                        raise RuntimeError(f"{name}: {r.status_code} {r.text[:200]}")
                out[name] = {"median_ms": statistics.median(times), "max_ms": max(times)}
                print(f"  {name:26s} median {out[name]['median_ms']:8.2f} ms   max {out[name]['max_ms']:8.2f} ms",
                      flush=True)
        return {"backend": url.split("@")[-1], "queue": queue, "n": n, "routes": out}
    finally:
        await backend.close()
        if url.startswith(("redis:", "rediss:")):
            await _drop_redis_queue(url, queue)


async def _drop_redis_queue(url: str, queue: str) -> None:
    """Delete the queue's keys from a (shared) Redis server, 1,000 per UNLINK."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    try:
        chunk: list[bytes] = []
        async for key in client.scan_iter(match=f"rq:{{{queue}}}:*", count=5000):
            chunk.append(key)
            if len(chunk) >= 1000:
                await client.unlink(*chunk)
                chunk.clear()
        if chunk:
            await client.unlink(*chunk)
    finally:
        await client.aclose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("urls", nargs="+")
    ap.add_argument("-n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--output-json")
    args = ap.parse_args()
    results: list[dict[str, Any]] = []

    async def go() -> None:
        for url in args.urls:
            print(url.split("@")[-1], flush=True)
            results.append(await measure(url, args.n, args.repeat))

    run_with_uvloop(go())
    if args.output_json:
        with open(args.output_json, "w") as fh:
            json.dump({"argv": sys.argv, "results": results}, fh, indent=2)


if __name__ == "__main__":
    main()
