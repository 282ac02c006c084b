"""Fault: one activity SIGKILLs its worker process on every attempt (issue 11, item 12).

A worker subprocess on a SQLite file runs one poison activity, which kills
its own process with SIGKILL, among 20 innocent ones (``max_retries=2``). A
supervisor loop restarts the worker whenever it dies, until everything has
ended or 90 s passed. The rule: a lease expiry counts only against the
activity that killed the process. The reaper counts an expiry only for an
activity claimed alone (a suspect); the innocents that shared the poison's
worker come back uncounted and each then runs alone, so the poison ends in
dead letter (after max_retries + 2 runs: its first expiry is not counted
either) and every innocent completes.

Slow (restarts a worker a few times): run with ``python -m pytest -m slow``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

import runnerq_fast as rq
from tests.acceptance.helpers import WorkerProcess

pytestmark = pytest.mark.slow

APP = '''
import asyncio, os, signal
import runnerq_fast as rq

engine = rq.WorkerEngine(None, queue_name="poison", lease_timeout=1.0, reaper_interval=0.2,
                         poll_interval=0.05, retry_delay=0.05, max_retry_delay=0.05)


@engine.activity("poison")
async def poison(payload, ctx):
    os.kill(os.getpid(), signal.SIGKILL)


@engine.activity("innocent")
async def innocent(payload, ctx):
    await asyncio.sleep(0.2)
    return payload
'''


async def _enqueue(url: str) -> tuple[str, list[str]]:
    backend = await rq.connect(url)
    try:
        ex = rq.ActivityExecutor(backend, "poison")
        poison = await ex.activity("poison").max_retries(2).execute()
        innocents = await ex.enqueue_many([ex.activity("innocent").payload(i).max_retries(2) for i in range(20)])
        return poison.activity_id, innocents
    finally:
        await backend.close()


async def _statuses(url: str, ids: list[str]) -> dict[str, str]:
    backend = await rq.connect(url)
    try:
        out = {}
        for i in ids:
            snap = await backend.get_activity(i)
            out[i] = "unknown" if snap is None else snap.status
        return out
    finally:
        await backend.close()


def test_a_poison_that_kills_its_worker_dead_letters_alone(tmp_path: Path) -> None:
    (tmp_path / "poison_app.py").write_text(APP)
    url = f"sqlite:///{tmp_path / 'poison.db'}"
    poison, innocents = asyncio.run(_enqueue(url))
    deadline = time.monotonic() + 90
    restarts = 0
    while time.monotonic() < deadline:
        w = WorkerProcess(["worker", "poison_app:engine", "--backend", url, "--concurrency", "8"],
                          tmp_path / f"worker-{restarts}.log", cwd=tmp_path)
        try:
            while w.proc.poll() is None and time.monotonic() < deadline:
                status = asyncio.run(_statuses(url, [poison, *innocents]))
                if all(s in rq.models.TERMINAL_STATUSES for s in status.values()):
                    break
                time.sleep(0.2)
        finally:
            w.close()
        restarts += 1
        status = asyncio.run(_statuses(url, [poison, *innocents]))
        if all(s in rq.models.TERMINAL_STATUSES for s in status.values()):
            break
    assert status[poison] == "dead_letter"
    innocent_dead = [i for i in innocents if status[i] == "dead_letter"]
    assert innocent_dead == [], f"{len(innocent_dead)} of 20 innocent activities dead-lettered ({restarts} workers)"
    assert all(status[i] == "completed" for i in innocents)
    assert restarts <= 8, f"{restarts} workers: the poison should run alone and be counted each time after the first"
