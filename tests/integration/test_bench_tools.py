"""The benchmark tools' own parts against the real servers: the bare reference loops and the services.

``benchmarks/peers/bare_pg.py`` and ``bare_redis.py`` run as the subprocesses
``compare.py`` and ``gate.py`` start, on a fresh PostgreSQL database and on a
private ``redis-server`` (never the shared one), and must report every job
claimed and acknowledged and leave nothing behind.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import msgspec
import pytest
import redis

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from _services import PgDatabases, PrivateRedis  # noqa: E402

from tests.pg_fixtures import ADMIN_URL  # noqa: E402


def _bare(kind: str, flag: str, url: str, n: int, tmp_path: Path) -> dict[str, object]:
    out = tmp_path / f"{kind}.json"
    subprocess.run([sys.executable, str(BENCHMARKS / "peers" / f"bare_{kind}.py"), "--n", str(n), "--batch-size",
                    "300", flag, url, "--output-json", str(out)], check=True, timeout=120)
    result: dict[str, object] = msgspec.json.decode(out.read_bytes())
    return result


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("redis-server is not on PATH")
        pytest.skip("redis-server is not on PATH")
    with PrivateRedis() as server:
        yield server


async def test_bare_pg_loop_claims_and_acks_every_job_and_drops_its_table(pg_empty_url: str, tmp_path: Path) -> None:
    result = _bare("pg", "--pg-dsn", pg_empty_url, 1000, tmp_path)
    assert result["n"] == 1000
    assert result["notes"] == {"completed": 1000, "synchronous_commit": "on", "enqueue": "COPY"}
    assert float(result["drain_per_s"]) > 0 and float(result["enqueue_per_s"]) > 0  # type: ignore[arg-type]
    conn = await asyncpg.connect(pg_empty_url)
    try:
        assert await conn.fetchval("SELECT to_regclass('bare_jobs')") is None
    finally:
        await conn.close()


def test_bare_redis_loop_acks_every_job_and_leaves_no_key(private_redis: PrivateRedis, tmp_path: Path) -> None:
    url = private_redis.url(5)
    result = _bare("redis", "--redis-url", url, 1000, tmp_path)
    assert result["notes"] == {"acked": 1000, "enqueue": "one Lua call per batch"}
    assert redis.Redis.from_url(url).dbsize() == 0


def test_private_redis_is_gone_after_the_run() -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not on PATH")
    with PrivateRedis() as server:
        client = redis.Redis.from_url(server.url(3))
        assert client.ping() and server.port != 6379
        client.close()
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(server.url(3), socket_connect_timeout=1).ping()


def test_pg_databases_are_created_fresh_and_dropped_at_exit(pg_template: str) -> None:
    async def count(name: str) -> int:
        admin = await asyncpg.connect(ADMIN_URL)
        try:
            n: int = await admin.fetchval("SELECT count(*) FROM pg_database WHERE datname = $1", name)
            return n
        finally:
            await admin.close()

    with PgDatabases(ADMIN_URL) as pg:
        name = pg.create("t").rsplit("/", 1)[1]
        assert name.startswith(f"rqbench_{pg.run_id}_")
        assert asyncio.run(count(name)) == 1
    assert asyncio.run(count(name)) == 0
