"""Bad Redis URLs: a clear error, fast, and nothing written anywhere."""

from __future__ import annotations

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
