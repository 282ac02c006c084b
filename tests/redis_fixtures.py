"""Fixtures for tests against a real Redis server (a pytest plugin).

Registered by ``pytest_plugins`` in ``tests/conftest.py``: ``redis_url`` and
``redis_namespace``, ``redis_backend``; :func:`damage` writes one damaged field of an
activity hash for the corrupt-row tests, :func:`to_earlier_layout` rewrites one as versions before
the packed fields ``n`` and ``k`` wrote it (for the upgrade tests).

The server comes from ``RUNNERQ_TEST_REDIS`` (default
``redis://127.0.0.1:6379/0``). The server is shared with other users, so a
test never flushes a database: each test gets a fresh key namespace
(``rqt<random>``) and deletes its keys (``SCAN MATCH`` + ``UNLINK``) afterwards.

If the server is unreachable the tests are skipped, unless ``CI=true``: then
they fail, so a broken CI service never passes silently.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from runnerq_fast.backends.redis import RedisBackend

REDIS_URL = os.environ.get("RUNNERQ_TEST_REDIS", "redis://127.0.0.1:6379/0")


NUMBER_PARTS = ("c", "r", "pr", "rc", "mr", "to")
"""The numbers packed in an activity hash's field ``n``, in order (created, ready, priority, retry count,
max retries, timeout; ``rq_nums`` in ``lua/_common.lua``), by the names they had as fields of their own."""


async def damage(client: aioredis.Redis, key: str, field: str, value: bytes | None) -> None:
    """Overwrite (``None``: remove) one field of the activity hash ``key``, which must exist.

    ``field`` is a hash field, or one of :data:`NUMBER_PARTS`: that part of the field ``n`` is
    replaced (removed: the field is left with a part too few).
    """
    if field not in NUMBER_PARTS:
        if value is None:
            assert await client.hdel(key, field) == 1
        else:
            assert await client.hset(key, field, value) == 0
        return
    n: Any = await client.hget(key, "n")  # bytes: the clients of these tests do not decode
    assert isinstance(n, bytes)
    created, _, rest = n.partition(b":")
    parts = [created, *rest.split(b"\x1f")]
    i = NUMBER_PARTS.index(field)
    if value is None:
        del parts[i]
    else:
        parts[i] = value
    assert await client.hset(key, "n", parts[0] + b":" + b"\x1f".join(parts[1:])) == 0


async def to_earlier_layout(client: Any, key: str) -> None:
    """Rewrite an activity hash as versions before the packed fields n and k wrote it."""
    n, k = await client.hmget(key, ["n", "k"])
    created, _, rest = n.partition(b":")
    old = dict(zip(("c", "r", "pr", "rc", "mr", "to"), [created.lstrip(b"0"), *rest.split(b"\x1f")], strict=True))
    if k is not None:
        old.update(zip(("tk", "sa", "l"), k.split(b"\x1f"), strict=True))
    await client.hset(key, mapping=old)
    await client.hdel(key, "n", "k")


@pytest.fixture
def redis_url() -> str:
    """URL of the test Redis server."""
    return REDIS_URL


async def delete_namespace(client: aioredis.Redis, namespace: str) -> int:
    """Delete every key of ``namespace``; returns how many."""
    n = 0
    async for key in client.scan_iter(match=f"{namespace}:*", count=1000):
        n += await client.unlink(key)
    return int(n)


@pytest.fixture
async def redis_namespace(redis_url: str) -> AsyncIterator[str]:
    """A fresh key namespace, its keys deleted after the test."""
    client = aioredis.Redis.from_url(redis_url, socket_connect_timeout=2)
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        await client.aclose()
        message = f"Redis at {redis_url} is not usable: {exc!r}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    namespace = f"rqt{uuid.uuid4().hex[:12]}"
    try:
        yield namespace
    finally:
        await delete_namespace(client, namespace)
        await client.aclose()


@pytest.fixture
async def redis_backend(redis_url: str, redis_namespace: str) -> AsyncIterator[RedisBackend]:
    """An opened :class:`RedisBackend` in a fresh namespace."""
    backend = await RedisBackend.open(redis_url, namespace=redis_namespace)
    try:
        yield backend
    finally:
        await backend.close()
