"""``runnerq-fast serve`` as a real process on a real port (SQLite file; PostgreSQL and Redis when present).

Enqueue over HTTP, a worker process drains, results come back over HTTP;
the SSE stream resumes across a reconnect while events are written and
across a server restart; the token is enforced; non-loopback binds are refused.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.acceptance.helpers import HERE, WorkerProcess, run_cli
from tests.acceptance.serve_helpers import ServeProcess
from tests.web_helpers import free_port, sse_events

Q = "/api/v1/queues/web/activities"
OBS = "/api/observability"


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'web.db'}"


def test_enqueue_over_http_a_worker_drains_then_results_over_http(
    tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    url = sqlite_url(tmp_path)
    server = start_serve("--backend", url)
    with httpx.Client(base_url=server.base_url, timeout=10) as c:
        ids = [c.post(Q, json={"type": "double", "payload": i}).json()["id"] for i in range(20)]
        batch = c.post(f"{Q}/batch", json={"activities": [{"type": "double", "payload": 100 + i} for i in range(30)]})
        assert batch.status_code == 201
        ids += [it["id"] for it in batch.json()["activities"]]
        refused = c.post(Q, json={"type": "refuse", "payload": "x"}).json()["id"]
        assert c.get(f"{OBS}/stats", params={"queue": "web"}).json()["pending_activities"] == 51
        worker = WorkerProcess(["worker", "web_app:engine", "--backend", url], tmp_path / "worker.log", HERE)
        try:
            waited = c.post(f"{Q}?wait=20", json={"type": "double", "payload": "ab"})
            assert waited.status_code == 201, waited.text
            assert waited.json()["status"] == "completed" and waited.json()["result"] == "abab"
            results = [c.get(f"{OBS}/activities/{i}/result").json() for i in ids]
            failed = c.get(f"{OBS}/activities/{refused}/result").json()
        finally:
            worker.signal(15)
            assert worker.wait(15) == 0
            worker.close()
        stats = c.get(f"{OBS}/stats", params={"queue": "web"}).json()
    assert [r["result"] for r in results] == [i * 2 for i in range(20)] + [(100 + i) * 2 for i in range(30)]
    assert all(r["status"] == "completed" for r in results)
    assert failed["status"] == "failed" and "refused" in failed["error"]
    assert stats["completed_activities"] == 51 and stats["failed_activities"] == 1
    assert server.stop() == 0


async def _resume_while_writing(base: str, n_writes: int) -> tuple[list[int], list[str]]:
    """Read the stream, drop it, reconnect with Last-Event-ID, all while a writer enqueues over HTTP."""
    ids: list[str] = []
    seen: list[int] = []
    async with httpx.AsyncClient(base_url=base, timeout=20) as c:

        async def writer() -> None:
            for i in range(n_writes):
                r = await c.post(Q, json={"type": "double", "payload": i})
                ids.append(r.json()["id"])
                await asyncio.sleep(0.002)

        task = asyncio.create_task(writer())
        for session in range(4):
            params = {"queue": "web"} | ({"after": "0"} if session == 0 else {})
            headers = {"Last-Event-ID": str(seen[-1])} if seen else {}
            async with c.stream("GET", f"{OBS}/stream", params=params, headers=headers) as r:
                assert r.status_code == 200
                got = await sse_events(r.aiter_lines(), 1 + 15)
            seen += [int(e["id"]) for e in got if "id" in e]
        await task
        # the rest, after the writer is done
        async with c.stream("GET", f"{OBS}/stream", params={"queue": "web"},
                            headers={"Last-Event-ID": str(seen[-1])}) as r:
            need = n_writes - len(seen)
            if need > 0:
                got = await sse_events(r.aiter_lines(), 1 + need)
                seen += [int(e["id"]) for e in got if "id" in e]
    return seen, ids


async def _stored_event_ids(base: str, ids: list[str]) -> list[int]:
    async with httpx.AsyncClient(base_url=base, timeout=20) as c:
        out: list[int] = []
        for i in ids:
            out += [e["id"] for e in (await c.get(f"{OBS}/activities/{i}/events")).json()]
    return sorted(out)


def test_sse_resumes_across_reconnects_while_events_are_written(
    tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    server = start_serve("--backend", sqlite_url(tmp_path))
    seen, ids = asyncio.run(_resume_while_writing(server.base_url, 100))
    assert len(seen) == len(set(seen)) == 100  # no duplicate
    assert seen == sorted(seen)
    assert seen == asyncio.run(_stored_event_ids(server.base_url, ids))  # no gap


async def _read(base: str, queue: str, n: int, last: int | None) -> list[dict[str, str]]:
    async with httpx.AsyncClient(base_url=base, timeout=20) as c:
        headers = {"Last-Event-ID": str(last)} if last is not None else {}
        params = {"queue": queue} | ({"after": "0"} if last is None else {})
        async with c.stream("GET", f"{OBS}/stream", params=params, headers=headers) as r:
            return [e for e in await sse_events(r.aiter_lines(), n + 1) if "id" in e]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "redis"])
def test_sse_resumes_across_a_server_restart(
    backend: str, tmp_path: Path, start_serve: Callable[..., ServeProcess], request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        url = sqlite_url(tmp_path)
    elif backend == "postgresql":
        url = request.getfixturevalue("fresh_pg_url")
    else:
        url = request.getfixturevalue("redis_db_url")
    queue = f"web{uuid.uuid4().hex[:8]}" if backend == "redis" else "web"
    try:
        _restart_and_resume(url, queue, start_serve)
    finally:
        if backend == "redis":
            asyncio.run(_drop_redis_queue(url, queue))


def _restart_and_resume(url: str, queue: str, start_serve: Callable[..., ServeProcess]) -> None:
    path = f"/api/v1/queues/{queue}/activities"
    first = start_serve("--backend", url, "--queue", queue)
    with httpx.Client(base_url=first.base_url, timeout=10) as c:
        ids = [c.post(path, json={"type": "double", "payload": i}).json()["id"] for i in range(10)]
    got = asyncio.run(_read(first.base_url, queue, 4, None))
    assert first.stop() == 0
    second = start_serve("--backend", url, "--queue", queue, port=first.port)
    with httpx.Client(base_url=second.base_url, timeout=10) as c:
        ids += [c.post(path, json={"type": "double", "payload": i}).json()["id"] for i in range(10, 15)]
    rest = asyncio.run(_read(second.base_url, queue, 15 - 4, int(got[-1]["id"])))
    seen = [int(e["id"]) for e in got + rest]
    assert [json.loads(e["data"])["activity_id"] for e in got + rest] == ids
    assert len(set(seen)) == 15 and seen == sorted(seen)
    assert seen == asyncio.run(_stored_event_ids(second.base_url, ids))


@pytest.fixture
def redis_db_url(redis_namespace: str, redis_url: str) -> str:
    """The test Redis server (the queue name is unique per test; its keys are deleted after it)."""
    return redis_url


async def _drop_redis_queue(url: str, queue: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    try:
        async for key in client.scan_iter(match=f"rq:{{{queue}}}:*", count=1000):
            await client.unlink(key)
    finally:
        await client.aclose()


def test_the_token_is_required_for_writes(tmp_path: Path, start_serve: Callable[..., ServeProcess]) -> None:
    server = start_serve("--backend", sqlite_url(tmp_path), env={"RUNNERQ_TOKEN": "t0ken"})
    with httpx.Client(base_url=server.base_url, timeout=10) as c:
        anonymous = c.post(Q, json={"type": "double", "payload": 1})
        wrong = c.post(Q, json={"type": "double", "payload": 1}, headers={"Authorization": "Bearer nope"})
        right = c.post(Q, json={"type": "double", "payload": 1}, headers={"Authorization": "Bearer t0ken"})
        read = c.get(f"{OBS}/stats", params={"queue": "web"})
    assert anonymous.status_code == 401 and wrong.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    assert right.status_code == 201
    assert read.status_code == 200 and read.json()["pending_activities"] == 1


def test_read_only_serve_refuses_writes(tmp_path: Path, start_serve: Callable[..., ServeProcess]) -> None:
    server = start_serve("--backend", sqlite_url(tmp_path), "--read-only")
    with httpx.Client(base_url=server.base_url, timeout=10) as c:
        assert c.post(Q, json={"type": "double"}).status_code == 405
        assert c.get("/readyz").json() == {"status": "ok", "backend": "sqlite"}


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "example.com"])
def test_a_non_loopback_bind_without_a_token_is_refused(host: str, tmp_path: Path) -> None:
    res = run_cli("serve", "--backend", sqlite_url(tmp_path), "--host", host, "--port", str(free_port()))
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert "refusing to listen" in res.stderr and "--insecure" in res.stderr and "RUNNERQ_TOKEN" in res.stderr
    assert not (tmp_path / "web.db").exists()  # refused before anything was opened


def test_insecure_or_a_token_passes_the_bind_check(tmp_path: Path) -> None:
    # 192.0.2.1 (TEST-NET-1) is on no interface here: the bind itself fails, after the check let it through
    insecure = run_cli("serve", "--backend", sqlite_url(tmp_path), "--host", "192.0.2.1", "--insecure")
    token = run_cli("serve", "--backend", sqlite_url(tmp_path), "--host", "192.0.2.1", RUNNERQ_TOKEN="x")
    for res in (insecure, token):
        assert res.returncode == 1, res.stderr
        assert "cannot listen on 192.0.2.1:8080" in res.stderr and "Traceback" not in res.stderr


def test_a_taken_port_and_a_bad_backend_are_one_line_errors(
    tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    server = start_serve("--backend", sqlite_url(tmp_path))
    taken = run_cli("serve", "--backend", sqlite_url(tmp_path), "--port", str(server.port))
    bad = run_cli("serve", "--backend", "mysql://x/y", "--port", str(free_port()))
    missing = run_cli("serve", "--port", str(free_port()))
    assert taken.returncode == 1 and "cannot listen" in taken.stderr and "Traceback" not in taken.stderr
    assert bad.returncode == 2 and "unsupported backend URL scheme" in bad.stderr
    assert missing.returncode == 2 and "RUNNERQ_BACKEND" in missing.stderr


async def _stop_while_streaming(server: ServeProcess) -> tuple[int, list[dict[str, str]]]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as c, \
            c.stream("GET", f"{OBS}/stream", params={"queue": "web"}) as r:
        lines = r.aiter_lines()
        first = await sse_events(lines, 1)
        code = await asyncio.to_thread(server.stop, 30)
        rest = await sse_events(lines, 10)  # returns when the server ends the stream
    return code, first + rest


def test_sigterm_ends_open_streams_first_and_exits_0(
    tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    server = start_serve("--backend", sqlite_url(tmp_path))
    code, got = asyncio.run(_stop_while_streaming(server))
    assert code == 0
    assert got == [{"retry": "2000"}]
    assert "timeout graceful shutdown exceeded" not in server.log()  # the stream did not hold the stop up


@pytest.mark.parametrize("token", ["\u20ac-secret", "line\nbreak"])
def test_a_token_no_header_can_carry_is_refused_at_start(token: str, tmp_path: Path) -> None:
    """A token outside Latin-1 started a server whose every write was 401 (issue 26, item 3)."""
    res = run_cli("serve", "--backend", sqlite_url(tmp_path), "--port", str(free_port()), RUNNERQ_TOKEN=token)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert "RUNNERQ_TOKEN" in res.stderr and "no request could ever match" in res.stderr
    assert not (tmp_path / "web.db").exists()  # refused before anything was opened


@pytest.mark.slow
def test_serve_answers_only_its_own_host_names_and_the_allowed_ones(
    tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    """DNS rebinding (issue 26, item 1): a loopback serve answered any Host, so a page whose name resolved to
    127.0.0.1 read every payload."""
    server = start_serve("--backend", sqlite_url(tmp_path), "--allowed-host", "queue.example",
                         env={"RUNNERQ_ALLOWED_HOSTS": "ignored.example"})
    with httpx.Client(base_url=server.base_url, timeout=10) as c:
        evil = c.get("/api/v1/queues", headers={"Host": f"evil.example:{server.port}"})
        listed = c.get("/api/v1/queues", headers={"Host": f"queue.example:{server.port}"})
        env_only = c.get("/api/v1/queues", headers={"Host": "ignored.example"})  # the option wins over the env
        local = c.get("/api/v1/queues", headers={"Host": f"localhost:{server.port}"})
        write = c.post(Q, json={"type": "double"}, headers={"Host": "evil.example"})
    assert evil.status_code == 400 and "--allowed-host" in evil.json()["detail"]
    assert listed.status_code == 200 and local.status_code == 200
    assert env_only.status_code == 400 and write.status_code == 400
    from_env = start_serve("--backend", sqlite_url(tmp_path), env={"RUNNERQ_ALLOWED_HOSTS": "a.example .b.example"})
    with httpx.Client(base_url=from_env.base_url, timeout=10) as c:
        assert c.get("/healthz", headers={"Host": "a.example"}).status_code == 200
        assert c.get("/healthz", headers={"Host": "x.b.example"}).status_code == 200
        assert c.get("/healthz", headers={"Host": "c.example"}).status_code == 400
    bad = run_cli("serve", "--backend", sqlite_url(tmp_path), "--port", str(free_port()),
                  "--allowed-host", "http://queue.example")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--allowed-host" in bad.stderr, bad.stderr
