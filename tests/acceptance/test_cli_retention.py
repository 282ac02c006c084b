"""``runnerq-fast prune``, ``queues`` and ``stats`` without ``--queue``, as real subprocesses on a SQLite file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import runnerq_fast as rq
from tests.acceptance.helpers import run_cli


async def _store(url: str, queues: dict[str, int], cancel: int) -> list[str]:
    """Enqueue ``queues[q]`` activities on each queue and cancel the first ``cancel`` (finished ones)."""
    backend = await rq.connect(url)
    try:
        ids: list[str] = []
        for queue, n in queues.items():
            ids += await rq.ActivityExecutor(backend, queue).enqueue_many([("mail", {})] * n)
        for activity_id in ids[:cancel]:
            assert await backend.cancel(activity_id)
        return ids
    finally:
        await backend.close()


async def _exists(url: str, ids: list[str]) -> list[bool]:
    backend = await rq.connect(url)
    try:
        return [await backend.get_activity(i) is not None for i in ids]
    finally:
        await backend.close()


def test_queues_stats_and_prune_on_the_command_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/ret.db"
    ids = asyncio.run(_store(url, {"a": 4, "b": 1}, cancel=3))

    listed = run_cli("queues", "--json", "--backend", url)
    assert listed.returncode == 0, listed.stderr
    by_name = {q["queue"]: q for q in json.loads(listed.stdout)}
    assert set(by_name) == {"a", "b"}
    assert (by_name["a"]["cancelled"], by_name["a"]["pending"], by_name["b"]["total"]) == (3, 1, 1)

    # stats without --queue says which queues there are instead of showing "default"
    several = run_cli("stats", "--backend", url)
    assert several.returncode == 0, several.stderr
    assert "2 queues" in several.stderr and "--queue" in several.stderr
    assert json.loads(run_cli("stats", "--json", "--backend", url).stdout)["queues"][0]["queue"] == "a"
    assert "by status" in run_cli("queues", "--backend", url).stdout

    bad = run_cli("prune", "--older-than", "1x", "--queue", "a", "--backend", url)
    assert bad.returncode == 2 and "--older-than" in bad.stderr
    unfinished = run_cli("prune", "--older-than", "0", "--status", "pending", "--backend", url)
    assert unfinished.returncode == 2
    young = run_cli("prune", "--older-than", "1h", "--queue", "a", "--json", "--backend", url)
    assert young.returncode == 0 and json.loads(young.stdout)["activities"] == 0
    said = run_cli("prune", "--older-than", "1h", "--queue", "a", "--backend", url).stdout
    assert "deleted 0 finished activities in 1 batch," in said, said  # was "in 1 batches"

    pruned = run_cli("prune", "--older-than", "0", "--queue", "a", "--json", "--backend", url)
    assert pruned.returncode == 0, pruned.stderr
    report = json.loads(pruned.stdout)
    assert (report["queue"], report["activities"], report["complete"]) == ("a", 3, True)
    assert asyncio.run(_exists(url, ids)) == [False, False, False, True, True]
    counts = json.loads(run_cli("stats", "--queue", "a", "--json", "--backend", url).stdout)
    assert (counts["total"], counts["pending"]) == (1, 1)


def test_stats_without_queue_shows_the_only_queue(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/solo.db"
    asyncio.run(_store(url, {"solo": 1}, cancel=0))
    res = run_cli("stats", "--json", "--backend", url)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["queue"] == "solo" and "only queue" in res.stderr
