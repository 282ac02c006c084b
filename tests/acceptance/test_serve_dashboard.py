"""The dashboard and workers routes of a real ``runnerq-fast serve`` process while a real worker process drains."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.acceptance.helpers import HERE, WorkerProcess
from tests.acceptance.serve_helpers import ServeProcess

Q = "/api/v1/queues/web/activities"
DASH = "/api/v1/queues/web/dashboard"


def _until(c: httpx.Client, ok: Callable[[dict[str, Any]], bool], url: str = DASH, **params: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = c.get(url, params=params).json()
        if ok(body):
            return body
        time.sleep(0.1)
    raise AssertionError(f"{url} never matched: {body}")


def test_a_served_dashboard_shows_the_worker_process_its_throughput_and_an_unhandled_type(
    tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    url = f"sqlite:///{tmp_path / 'dash.db'}"
    server = start_serve("--backend", url, "--queue", "web")
    with httpx.Client(base_url=server.base_url, timeout=10) as c:
        for i in range(10):
            assert c.post(Q, json={"type": "double", "payload": i}).status_code == 201
        for _ in range(2):
            assert c.post(Q, json={"type": "duoble", "payload": 1}).status_code == 201  # a typo: no handler
        before = c.get(DASH).json()
        assert before["unhandled_types"] == [{"type": "double", "ready": 10}, {"type": "duoble", "ready": 2}]
        assert before["workers"] == 0 and c.get("/api/v1/workers").json() == {"workers": []}
        worker = WorkerProcess(["worker", "web_app:engine", "--backend", url], tmp_path / "worker.log", HERE)
        try:
            (w,) = _until(c, lambda b: len(b["workers"]) == 1, "/api/v1/workers", queue="web")["workers"]
            assert w["pid"] == worker.pid and sorted(w["types"]) == ["double", "refuse"]
            after = _until(c, lambda b: sum(p["completed"] for p in b["series"]) == 10)
            assert after["counts"]["completed"] == 10 and after["counts"]["pending"] == 2
            assert after["unhandled_types"] == [{"type": "duoble", "ready": 2}] and after["workers"] == 1
        finally:
            worker.signal(15)
            assert worker.wait(15) == 0
            worker.close()
        assert c.get("/api/v1/workers").json() == {"workers": []}
    assert server.stop() == 0
