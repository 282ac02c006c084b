"""Redis server instructions per activity of the hot-path scripts, under callgrind, beside the bare Lua loop.

::

    .venv/bin/python benchmarks/redis_callgrind.py --port 7401 -n 2000
    PYTHONPATH=/path/to/other/checkout .venv/bin/python benchmarks/redis_callgrind.py --port 7401

Starts ``valgrind --tool=callgrind redis-server`` on ``--port`` (no
persistence), then for runnerq-fast and for the bare loop of
``benchmarks/peers/bare_redis.py``: enqueues ``-n`` no-op activities in
batches of 500, claims them 256 at a time and acks them completed 256 at a
time, the batch sizes of a default drain. The acks carry no result by default,
as a drain's do (the benchmarks' no-op handler returns ``None``); ``--result
null`` sends the JSON text ``null`` instead, the path of a handler that returns
a value (until the ack script took completions without a result in runs of
their own, those went through its general path at 66k instructions per ack,
not 50k: the figure measured here was not the drain's). Around each phase the counters are
zeroed and dumped (``callgrind_control``), and the instructions (Ir) of the
phase are printed per activity. Instruction counts do not depend on the
machine's load, so two checkouts compare exactly whatever else runs.
``--keep DIR`` keeps the dumps there for ``callgrind_annotate``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis

import runnerq_fast as rq
from runnerq_fast.ids import new_activity_id
from runnerq_fast.models import Ack, AckOutcome, ClaimedActivity, NewActivity

sys.path.insert(0, str(Path(__file__).parent / "peers"))
import bare_redis


class Grind:
    """A redis-server under callgrind and the dumps of its phases."""

    def __init__(self, port: int, out: Path) -> None:
        self.port, self.out = port, out
        with contextlib.suppress(redis.ConnectionError), redis.Redis(port=port) as other:
            other.ping()
            raise SystemExit(f"a server already listens on port {port}: give a free one")
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p", "redis-server", "--port", str(port),
             "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        r = redis.Redis(port=port)
        for _ in range(600):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        r.close()

    def _control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.proc.pid)], check=True, capture_output=True)

    def zero(self) -> None:
        self._control("-z")

    def dump(self, name: str) -> int:
        """Dump the counters since :meth:`zero`; returns the instructions."""
        before = set(self.out.glob("cg.*"))
        self._control("-d", name)
        (path,) = set(self.out.glob("cg.*")) - before
        text = path.read_text(errors="replace")
        m = re.search(r"^summary: (\d+)", text, re.M) or re.search(r"^totals: (\d+)", text, re.M)
        assert m, path
        path.rename(self.out / name)
        return int(m.group(1))

    def stop(self) -> None:
        r = redis.Redis(port=self.port)
        with contextlib.suppress(redis.ConnectionError):
            r.shutdown(nosave=True)
        self.proc.wait()


async def _runnerq(g: Grind, n: int, result: bytes | None) -> dict[str, int]:
    backend = await rq.connect(f"redis://127.0.0.1:{g.port}/0", namespace=f"cg{uuid.uuid4().hex[:8]}")
    queue = "cg"
    items = [NewActivity(id=new_activity_id(), activity_type="noop", payload=b"null") for _ in range(n)]
    out: dict[str, int] = {}
    try:
        g.zero()
        for i in range(0, n, 500):
            await backend.enqueue(queue, items[i : i + 500])
        out["enqueue"] = g.dump("rq-enqueue")
        claimed: list[ClaimedActivity] = []
        g.zero()
        while len(claimed) < n:
            got = await backend.claim(queue, "w", 256, ["noop"], 30_000)
            if not got:
                raise RuntimeError(f"claimed {len(claimed)} of {n}")
            claimed += got
        out["claim"] = g.dump("rq-claim")
        g.zero()
        for i in range(0, n, 256):
            await backend.ack(
                queue, [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, result) for c in claimed[i : i + 256]]
            )
        out["ack"] = g.dump("rq-ack")
    finally:
        await backend.close()
    return out


async def _bare(g: Grind, n: int) -> dict[str, int]:
    import redis.asyncio as aioredis

    client: Any = aioredis.Redis(port=g.port)
    prefix = f"bare:{{{uuid.uuid4().hex[:12]}}}:"
    ids = [uuid.uuid4().hex for _ in range(n)]
    enqueue = client.register_script(bare_redis.ENQUEUE)
    claim = client.register_script(bare_redis.CLAIM)
    ack = client.register_script(bare_redis.ACK)
    for s in (bare_redis.ENQUEUE, bare_redis.CLAIM, bare_redis.ACK):
        await client.script_load(s)
    out: dict[str, int] = {}
    g.zero()
    for start in range(0, n, 500):
        await enqueue(keys=[prefix], args=[int(time.time() * 1000), *ids[start : start + 500]])
    out["enqueue"] = g.dump("bare-enqueue")
    batches = []
    g.zero()
    while True:
        token = uuid.uuid4().hex
        got = await claim(keys=[prefix], args=[256, int(time.time() * 1000) + 30_000, token])
        if not got:
            break
        batches.append((token, got[0::2]))
    out["claim"] = g.dump("bare-claim")
    g.zero()
    for token, claimed in batches:
        await ack(keys=[prefix], args=[token, int(time.time() * 1000), *claimed])
    out["ack"] = g.dump("bare-ack")
    await client.aclose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True, help="a free port for the callgrind redis-server")
    parser.add_argument("-n", type=int, default=2000, help="activities (default 2,000)")
    parser.add_argument("--keep", type=Path, help="keep the callgrind dumps in this directory")
    parser.add_argument("--no-bare", action="store_true", help="leave the bare loop out")
    parser.add_argument("--result", choices=("none", "null"), default="none",
                        help="what each ack carries: none (a handler that returns None, as the benchmarks' no-op "
                             "does; the default) or null (the JSON text null)")
    args = parser.parse_args()
    out = args.keep or Path(tempfile.mkdtemp(prefix="rq-callgrind-"))
    out.mkdir(parents=True, exist_ok=True)
    g = Grind(args.port, out)
    try:
        rows = {"runnerq": asyncio.run(_runnerq(g, args.n, None if args.result == "none" else b"null"))}
        if not args.no_bare:
            rows["bare"] = asyncio.run(_bare(g, args.n))
    finally:
        g.stop()
    print(f"server instructions per activity (n = {args.n}, results {args.result}; dumps in {out})")
    for name, phases in rows.items():
        per = {k: v / args.n for k, v in phases.items()}
        print(
            f"{name:8} enqueue {per['enqueue']:9.0f}  claim {per['claim']:9.0f}  ack {per['ack']:9.0f}"
            f"  claim+ack {per['claim'] + per['ack']:9.0f}"
        )


if __name__ == "__main__":
    main()
