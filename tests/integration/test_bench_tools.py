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
import tempfile
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


def _pg_callgrind(tmp_path: Path, *extra: str) -> dict[str, dict[str, int]]:
    """Run benchmarks/pg_callgrind.py on a small drain; its per-phase figures by system."""
    out = subprocess.run([sys.executable, str(BENCHMARKS / "pg_callgrind.py"), "-n", "1000", "--claim-batch", "100",
                          "--ack-batch", "200", "--keep", str(tmp_path / "dumps"), *extra],
                         check=True, capture_output=True, text=True, timeout=600).stdout
    rows: dict[str, dict[str, int]] = {}
    for line in out.splitlines():
        words = line.split()
        if words and words[0] in ("runnerq", "bare"):
            rows[words[0]] = {words[i]: int(words[i + 1]) for i in range(1, len(words) - 1, 2)}
    return rows


@pytest.mark.slow
def test_pg_callgrind_counts_each_phase_and_sees_an_index_go(tmp_path: Path) -> None:
    """Server instructions are exact: dropping an index the acks write must lower the ack's count, and only the
    phases that write it; the private cluster is gone afterwards."""
    if shutil.which("valgrind") is None or not Path("/usr/lib/postgresql").exists():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("valgrind or the PostgreSQL server programs are missing")
        pytest.skip("valgrind or the PostgreSQL server programs are missing")
    before = set(Path(tempfile.gettempdir()).glob("rq-pgcg-*"))
    plain = _pg_callgrind(tmp_path)
    assert set(plain) == {"runnerq", "bare"}
    for phases in plain.values():
        assert all(phases[k] > 1000 for k in ("enqueue", "claim", "ack")), phases
        assert phases["claim+ack"] == phases["claim"] + phases["ack"] or abs(
            phases["claim+ack"] - phases["claim"] - phases["ack"]) <= 1  # rounding of the per-activity figures
    sql = tmp_path / "try.sql"
    sql.write_text("DROP INDEX runnerq_activities_type_listing_idx;")
    lean = _pg_callgrind(tmp_path, "--no-bare", "--setup-sql", str(sql))["runnerq"]
    # every ack and enqueue writes one entry into that index (more than 10k instructions each); a claim writes none
    assert lean["ack"] < plain["runnerq"]["ack"] - 10_000 and lean["enqueue"] < plain["runnerq"]["enqueue"] - 10_000
    assert abs(lean["claim"] - plain["runnerq"]["claim"]) < 5_000
    assert set(Path(tempfile.gettempdir()).glob("rq-pgcg-*")) == before
    # bad input is refused before a server starts (an --ack-batch of 0 once looped for ever)
    for bad in (["--ack-batch", "0"], ["-n", "-5"], ["--setup-sql", str(tmp_path / "missing.sql")],
                ["--keep", str(sql)]):
        run = subprocess.run([sys.executable, str(BENCHMARKS / "pg_callgrind.py"), *bad],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 2 and "error:" in run.stderr and "Traceback" not in run.stderr, (bad, run.stderr)
    sql.write_text("SELEC broken;")
    run = subprocess.run([sys.executable, str(BENCHMARKS / "pg_callgrind.py"), "-n", "100", "--no-bare",
                          "--setup-sql", str(sql)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 1 and "--setup-sql failed: PostgresSyntaxError" in run.stderr, run.stderr
    assert set(Path(tempfile.gettempdir()).glob("rq-pgcg-*")) == before
