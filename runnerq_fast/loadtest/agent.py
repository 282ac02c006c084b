"""The Python-API enqueuer of locust's API users: a process of its own, with no gevent in it.

locust monkey-patches the standard library with gevent, and an asyncio (or
uvloop) event loop cannot run under that patching, so the locust process
cannot hold a backend itself. Each locust process that has API users starts
one agent (``python -m runnerq_fast.loadtest.agent --backend URL --queue Q``)
and talks to it over its stdin and stdout, one JSON array per line:

* request: ``[request id, single (bool), [ActivitySpec, ...]]``;
* answer: ``[request id, [id, ...], [created, ...], error or null, seconds]``.

The agent enqueues through :class:`~runnerq_fast.ActivityExecutor`
(``ActivityBuilder.execute`` for a single request, ``enqueue_many_futures``
for a batch), each request as a task of its own, and answers with the time
the API call took, measured around that call alone (``time.perf_counter``);
the locust user reports that time with ``events.request.fire``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import msgspec

import runnerq_fast as rq
from runnerq_fast.engine import run_with_uvloop
from runnerq_fast.loadtest.mix import ActivitySpec

__all__ = ["Request", "main"]

Request = tuple[int, bool, list[ActivitySpec]]
_decode = msgspec.json.Decoder(Request).decode
_encode = msgspec.json.Encoder().encode


def _builder(executor: rq.ActivityExecutor, spec: ActivitySpec) -> rq.ActivityBuilder:
    b = executor.activity(spec.type).payload(spec.payload).priority(spec.priority_number)
    if spec.delay:
        b.delay(spec.delay)
    if spec.idempotency_key is not None:
        b.idempotency_key(spec.idempotency_key, rq.OnDuplicate.RETURN_EXISTING)
    return b


async def _answer(executor: rq.ActivityExecutor, request: Request) -> bytes:
    rid, single, specs = request
    answer: list[Any]
    start = time.perf_counter()
    try:
        if single:
            futures = [await _builder(executor, specs[0]).execute()]
        else:
            futures = await executor.enqueue_many_futures([_builder(executor, s) for s in specs])
        answer = [rid, [f.activity_id for f in futures], [f.created for f in futures], None]
    except Exception as exc:
        answer = [rid, [], [], f"{type(exc).__name__}: {exc}"]
    answer.append(time.perf_counter() - start)
    return _encode(answer) + b"\n"


async def _serve(url: str, queue: str) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout.buffer
    backend = await rq.connect(url)
    executor = rq.ActivityExecutor(backend, queue)
    tasks: set[asyncio.Task[None]] = set()

    async def handle(request: Request) -> None:
        out.write(await _answer(executor, request))
        out.flush()

    out.write(b"ready\n")
    out.flush()
    try:
        while (line := await reader.readline()).endswith(b"\n"):  # a cut last line is no request
            task = asyncio.create_task(handle(_decode(line)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks)
    finally:
        await backend.close()


def main(argv: list[str] | None = None) -> None:
    """Run the agent until its stdin closes."""
    parser = argparse.ArgumentParser(prog="python -m runnerq_fast.loadtest.agent", description=__doc__)
    parser.add_argument("--backend", required=True, help="backend URL")
    parser.add_argument("--queue", required=True, help="queue to enqueue into")
    args = parser.parse_args(argv)
    run_with_uvloop(_serve(args.backend, args.queue))


if __name__ == "__main__":
    main()
