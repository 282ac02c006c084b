"""The worker registry of the Redis backend, and what a worker could claim now (a mixin).

Each queue keeps its entries in its own hash tag (:mod:`.keys`): a hash
``workers`` (worker id -> the :class:`~runnerq_fast.models.WorkerInfo` as
JSON) and a sorted set ``workers:exp`` scored by expiry on the server's clock,
both changed by ``lua/workers.lua`` in one call. The queues that ever had an
entry are a set outside any hash tag, read only to list every queue's workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from runnerq_fast.backends.redis import keys
from runnerq_fast.backends.redis.guard import guarded
from runnerq_fast.models import ReadyWork, TypeDefaults, WorkerInfo
from runnerq_fast.storage import check_worker_ttl

__all__ = ["DUE_SCAN", "RedisRegistry"]

DUE_SCAN = 1000
"""Most due scheduled or retrying activities :meth:`RedisRegistry.ready_work` reads the type of
(as many as one claim promotes); beyond them its counts are a lower bound."""

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(WorkerInfo).decode
_decode_defaults = msgspec.json.Decoder(TypeDefaults).decode


class RedisRegistry:
    """The registry half of :class:`~runnerq_fast.backends.redis.RedisBackend`.

    It uses the backend's client (``_r``), namespace (``_ns``) and script
    runner (``_run``).
    """

    _r: Any
    _ns: str

    async def _run(self, name: str, queue: str, args: Sequence[Any]) -> Any:  # pragma: no cover - the backend's
        raise NotImplementedError

    async def register_worker(self, info: WorkerInfo, ttl_ms: int) -> None:
        await self._run("workers", info.queue, ["register", info.worker_id, _encode(info), check_worker_ttl(ttl_ms)])
        # every time, not once per client: a server that lost its data (restart without persistence)
        # gets the queue back in the set on the next heartbeat (the set is outside the queue's hash tag,
        # so not in the script)
        await guarded(self._r.sadd(keys.worker_queues(self._ns), info.queue))

    async def deregister_worker(self, queue: str, worker_id: str) -> None:
        await self._run("workers", queue, ["deregister", worker_id])

    async def list_workers(self, queue: str | None = None) -> list[WorkerInfo]:
        if queue is None:
            names = sorted(m.decode() for m in await guarded(self._r.smembers(keys.worker_queues(self._ns))))
        else:
            names = [queue]
        out: list[WorkerInfo] = []
        for name in names:
            out += [_decode(v) for v in await self._run("workers", name, ["list"]) if v is not None]
        return out

    async def set_type_defaults(self, queue: str, defaults: Sequence[TypeDefaults]) -> None:
        if defaults:
            mapping = {d.activity_type: _encode(d) for d in defaults}
            await guarded(self._r.hset(keys.type_defaults(self._ns, queue), mapping=mapping))

    async def get_type_defaults(self, queue: str) -> dict[str, TypeDefaults]:
        raw = await guarded(self._r.hgetall(keys.type_defaults(self._ns, queue)))
        out: dict[str, TypeDefaults] = {}
        for value in raw.values():
            d = _decode_defaults(value)
            out[d.activity_type] = d
        return out

    async def ready_work(self, queue: str) -> ReadyWork:
        flat = await self._run("ready", queue, [DUE_SCAN])
        by_type = {flat[j].decode(): int(flat[j + 1]) for j in range(0, len(flat), 2)}
        oldest = int((await self._run("summary", queue, ["pending"]))[2])
        return ReadyWork(by_type, None if oldest < 0 else oldest)
