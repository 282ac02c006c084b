"""Bad Redis URLs: a clear error, fast, and nothing written anywhere."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import pytest

import runnerq_fast as rq
from runnerq_fast.backends.redis import RedisBackend


def _hostport(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or 6379}"


@pytest.mark.parametrize("path", ["/abc", "/1x", "/ 3", "/0/extra"])
async def test_a_database_that_is_not_a_number_is_a_config_error(
    redis_url: str, redis_namespace: str, path: str
) -> None:
    # redis-py ignores a non-numeric path and silently uses database 0
    url = f"redis://{_hostport(redis_url)}{path}"
    with pytest.raises(rq.ConfigError, match="database"):
        await RedisBackend.open(url, namespace=redis_namespace)


async def test_tls_against_a_plain_server_fails_within_one_connect_timeout(
    redis_url: str, redis_namespace: str
) -> None:
    # the TLS handshake waits for a reply that never comes; opening retried it
    # four times, 5 s each, so 'runnerq-fast stats --backend rediss://...' took 21 s
    started = time.monotonic()
    with pytest.raises(rq.BackendError, match="cannot use Redis"):
        await RedisBackend.open(f"rediss://{_hostport(redis_url)}/0", namespace=redis_namespace)
    assert time.monotonic() - started < 8.0


async def test_an_unreachable_server_fails_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(rq.BackendError, match="cannot use Redis"):
        await RedisBackend.open("redis://127.0.0.1:1/0")
    assert time.monotonic() - started < 0.5
