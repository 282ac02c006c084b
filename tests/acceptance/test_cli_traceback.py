"""``runnerq-fast inspect`` shows the traceback of an activity's failed attempt (issue 27)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import runnerq_fast as rq
from tests.acceptance.helpers import run_cli
from tests.conformance import FAST


def _lookup(payload: Any) -> Any:
    return payload["missing"]


async def _fail_one(url: str) -> str:
    backend = await rq.connect(url)
    try:
        engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "cli-tb"})

        @engine.activity("parse")
        async def parse(payload: Any, ctx: rq.ActivityContext) -> None:
            _lookup(payload)

        fut = await engine.executor.activity("parse").payload({}).max_retries(0).execute()
        async with engine:
            with pytest.raises(rq.ActivityFailed):
                await fut.result(timeout=10)
        return fut.activity_id
    finally:
        await backend.close()


def test_inspect_prints_the_traceback_and_json_carries_it(tmp_path: Path) -> None:
    """Before, only ``KeyError: 'missing'`` was stored: no frame said where it came from."""
    url = f"sqlite:///{tmp_path / 'q.db'}"
    assert run_cli("migrate", "--backend", url).returncode == 0
    aid = asyncio.run(_fail_one(url))
    shown = run_cli("inspect", aid, "--backend", url)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "traceback (the last attempt whose handler raised):" in out, out
    assert "Traceback (most recent call last):" in out and "in _lookup" in out, out
    assert 'return payload["missing"]' in out and "KeyError: 'missing'" in out, out
    as_json = run_cli("inspect", aid, "--json", "--backend", url)
    assert as_json.returncode == 0, as_json.stderr
    tb = json.loads(as_json.stdout)["activity"]["traceback"]
    assert tb.startswith("Traceback (most recent call last):\n") and tb.endswith("KeyError: 'missing'\n")


def test_the_sync_client_s_activity_failed_carries_the_traceback(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    assert run_cli("migrate", "--backend", url).returncode == 0
    aid = asyncio.run(_fail_one(url))
    with rq.SyncExecutor(url, "cli-tb") as client, pytest.raises(rq.ActivityFailed) as info:
        client.result(aid, timeout=5)
    assert info.value.traceback is not None and "in _lookup\n" in info.value.traceback
    assert info.value.error == "KeyError: 'missing'"


async def _fail_three_times(url: str) -> str:
    backend = await rq.connect(url)
    try:
        engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "cli-tb"})

        @engine.activity("thrice")
        async def thrice(payload: Any, ctx: rq.ActivityContext) -> None:
            raise ValueError(f"attempt {ctx.retry_count + 1} failed")

        fut = await engine.executor.activity("thrice").max_retries(2).execute()
        async with engine:
            with pytest.raises(rq.ActivityFailed):
                await fut.result(timeout=10)
        return fut.activity_id
    finally:
        await backend.close()


def test_inspect_prints_each_failed_attempt_s_traceback(tmp_path: Path) -> None:
    """Before, only the last attempt's traceback was kept: the first two were lost."""
    url = f"sqlite:///{tmp_path / 'q.db'}"
    assert run_cli("migrate", "--backend", url).returncode == 0
    aid = asyncio.run(_fail_three_times(url))
    shown = run_cli("inspect", aid, "--backend", url)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert out.count("attempt 1, below") == 1 and out.count("attempt 3, below") == 1, out
    first = out.index("traceback of attempt 1 (event ")
    second = out.index("traceback of attempt 2 (event ")
    assert first < out.index("ValueError: attempt 1 failed", first) < second, out
    assert "ValueError: attempt 2 failed" in out[second:], out
    assert "dead_letter):\n(the last attempt's, printed above)" in out, out
    # three tracebacks, the last one printed once (above)
    assert out.count('raise ValueError(f"attempt {ctx.retry_count + 1} failed")') == 3, out
    as_json = run_cli("inspect", aid, "--json", "--backend", url)
    events = json.loads(as_json.stdout)["events"]
    tbs = [e["traceback"] for e in events if e["traceback"] is not None]
    assert [tb.rstrip().splitlines()[-1] for tb in tbs] == [f"ValueError: attempt {n} failed" for n in (1, 2, 3)]
    assert [e["event_type"] for e in events if e["traceback"]] == ["retrying", "retrying", "dead_letter"]
