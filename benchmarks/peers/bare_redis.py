"""Reference: the bare Lua claim + ack loop on Redis, the physical limit of this design.

No queue library: redis-py (hiredis parser) on one connection and three Lua
scripts, each one ``EVALSHA`` per batch. Keys live under ``bare:{<run>}:``
(``P``) and are removed at the end:

=================  ======  ===========================================
key                type    contents
=================  ======  ===========================================
``P a:<id>``       HASH    type, payload, status, claim token, times
``P ready``        ZSET    ready ids, score = priority and ready time
``P lease``        ZSET    claimed ids, score = lease deadline (ms)
=================  ======  ===========================================

* enqueue: one script call per batch writes each hash and its ready entry;
* drain: a claim script pops up to ``claim_batch`` ids (``ZPOPMIN``), leases
  them and returns their payloads; an ack script marks them completed if the
  claim token still matches; until a claim comes back empty.

Variants: ``default`` claims 256 per call (runnerq-fast's default
``max_workers``), ``batch1000`` claims 1,000.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import redis.asyncio as aioredis
from _harness import PeerConfig, Timings, main, run_async, version_of

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {"claim_batch": 256},
    "batch1000": {"claim_batch": 1000},
}

ENQUEUE = """
local p, now = KEYS[1], tonumber(ARGV[1])
local score = -2 * 1e13 + now   -- priority NORMAL first, then ready time
for i = 2, #ARGV do
  local id = ARGV[i]
  redis.call('HSET', p .. 'a:' .. id, 'type', 'noop', 'payload', 'null', 'status', 'pending', 'created', now)
  redis.call('ZADD', p .. 'ready', score, id)
end
return #ARGV - 1
"""

CLAIM = """
local p, count, deadline, token = KEYS[1], tonumber(ARGV[1]), ARGV[2], ARGV[3]
local popped = redis.call('ZPOPMIN', p .. 'ready', count)
local out = {}
for i = 1, #popped, 2 do
  local id = popped[i]
  local key = p .. 'a:' .. id
  redis.call('ZADD', p .. 'lease', deadline, id)
  redis.call('HSET', key, 'status', 'processing', 'token', token)
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', key, 'payload')
end
return out
"""

ACK = """
local p, token, now = KEYS[1], ARGV[1], ARGV[2]
local acked = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local key = p .. 'a:' .. id
  if redis.call('HGET', key, 'token') == token then
    redis.call('HSET', key, 'status', 'completed', 'finished', now)
    redis.call('ZREM', p .. 'lease', id)
    acked = acked + 1
  end
end
return acked
"""


async def _run(config: PeerConfig, settings: dict[str, Any]) -> Timings:
    if not config.redis_url:
        raise SystemExit("bare_redis needs --redis-url")
    claim_batch = int(settings["claim_batch"])
    client = aioredis.from_url(config.redis_url)
    prefix = f"bare:{{{uuid.uuid4().hex[:12]}}}:"
    ids = [uuid.uuid4().hex for _ in range(config.n)]
    try:
        enqueue = client.register_script(ENQUEUE)
        claim = client.register_script(CLAIM)
        ack = client.register_script(ACK)
        await client.script_load(ENQUEUE)
        await client.script_load(CLAIM)
        await client.script_load(ACK)
        n = config.n

        t0 = time.perf_counter()
        for start in range(0, n, config.batch_size):
            await enqueue(keys=[prefix], args=[int(time.time() * 1000), *ids[start:start + config.batch_size]])
        enqueue_seconds = time.perf_counter() - t0

        t0 = time.perf_counter()
        deadline = t0 + config.timeout
        drained = 0
        while True:
            token = uuid.uuid4().hex
            now_ms = int(time.time() * 1000)
            out = await claim(keys=[prefix], args=[claim_batch, now_ms + 30_000, token])
            if not out:
                break
            claimed = out[0::2]   # the no-op "handler" runs here
            drained += await ack(keys=[prefix], args=[token, now_ms, *claimed])
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{drained}/{n} drained in {config.timeout} s")
        drain_seconds = time.perf_counter() - t0
        if drained != n:
            raise RuntimeError(f"{drained} acked, expected {n}")
        return Timings(enqueue_seconds, drain_seconds, {"acked": drained, "enqueue": "one Lua call per batch"})
    finally:
        keys = [f"{prefix}a:{i}" for i in ids] + [f"{prefix}ready", f"{prefix}lease"]
        for start in range(0, len(keys), 1000):
            await client.unlink(*keys[start:start + 1000])
        await client.aclose()


def run(config: PeerConfig, settings: dict[str, Any]) -> Timings:
    """The workload (see the module docstring)."""
    return run_async(_run(config, settings))


if __name__ == "__main__":
    main("bare Redis Lua loop", f"redis-py {version_of('redis')}", VARIANTS, run)
