"""Children of a SIGKILLed supervisor: gone within 0.5 s, whatever they were doing, and claiming nothing more.

A real supervisor (``runnerq-fast worker supervised_app:engine --processes 2``)
is killed with SIGKILL at each point of its children's life: right after it
spawned them (they are still importing the package), while they import the
app (``SUPERVISED_APP_IMPORT_GATE`` holds the import), while their engine
starts (a SQLite file whose write lock the test holds, so the migration waits;
a PostgreSQL server behind a proxy that holds the connection), and while they
run activities. Each time every child must be gone (exited, or a zombie
nobody reaped) within :data:`ORPHAN_DEADLINE` seconds of the kill, measured,
and nothing may be claimed after the kill: a child killed before its engine
started claims nothing even once the store answers again, and a running one
runs nothing claimed after the kill and leaves nothing in ``processing``
(what it ran when its supervisor died is cancelled and released to
``pending``, without counting an attempt).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

import runnerq_fast as rq
from tests.acceptance.helpers import HERE, WorkerProcess, subprocess_env
from tests.acceptance.test_supervisor import (
    APP,
    QUEUE,
    _enqueue,
    _stats,
    alive,
    child_pids,
    ran,
    sqlite_url,
    wait_drained,
    wait_for_engines,
)

ORPHAN_DEADLINE = 0.5
"""Seconds within which every child of a killed supervisor must be gone (the README's promise)."""


# ----------------------------------------------------------------- helpers
@pytest.fixture
def start(start_worker: Callable[..., WorkerProcess]) -> Callable[..., WorkerProcess]:
    """Start ``runnerq-fast worker supervised_app:engine ARGS`` from this directory."""

    def go(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        return start_worker(APP, *args, cwd=HERE, env=env)

    return go


def wait_for_children(w: WorkerProcess, n: int, timeout: float = 20.0) -> list[int]:
    """Pids of the first ``n`` children, once the supervisor logged that it started them."""
    deadline = time.monotonic() + timeout
    while len(pids := child_pids(w)) < n:
        assert w.proc.poll() is None, w.log()
        assert time.monotonic() < deadline, w.log()
        time.sleep(0.005)
    return pids[:n]


def kill_supervisor(w: WorkerProcess, pids: list[int]) -> tuple[float, float]:
    """SIGKILL the supervisor; return the kill's wall-clock time (epoch ms) and the seconds until every child was gone.

    Waits at most 20 s for the children, so a failure reports the time it did take.
    """
    assert all(alive(p) for p in pids), w.log()
    kill_ms = time.time() * 1000.0
    began = time.monotonic()
    w.signal(signal.SIGKILL)
    while any(alive(p) for p in pids) and time.monotonic() - began < 20:
        time.sleep(0.002)
    gone_after = time.monotonic() - began
    assert w.wait(5) == -signal.SIGKILL
    return kill_ms, gone_after


def assert_gone_in_time(w: WorkerProcess, pids: list[int], gone_after: float) -> None:
    left = [p for p in pids if alive(p)]
    assert not left and gone_after <= ORPHAN_DEADLINE, (
        f"children {pids} gone {gone_after:.3f} s after their supervisor's SIGKILL (still running: {left}); "
        f"the limit is {ORPHAN_DEADLINE} s\n{w.log()}")
    print(f"every child gone {gone_after * 1000:.0f} ms after the supervisor's SIGKILL")


def fd_targets(pid: int) -> list[str]:
    """What the open file descriptors of process ``pid`` point to (Linux ``/proc``)."""
    found: list[str] = []
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                found.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return found


async def _claims(url: str, ids: list[str]) -> list[tuple[str, str, int]]:
    """Every ``claimed`` event of ``ids``: (activity id, worker id, epoch ms)."""
    backend = await rq.connect(url)
    try:
        found: list[tuple[str, str, int]] = []
        for activity_id in ids:
            found += [(activity_id, e.detail or "", e.at_ms) for e in await backend.get_events(activity_id)
                      if e.event_type == "claimed"]
        return found
    finally:
        await backend.close()


def _log_ms(stamp: str) -> int:
    """Epoch milliseconds of a log line's ``%(asctime)s`` (local time, ``2026-01-02 03:04:05,678``)."""
    return round(datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp() * 1000)


async def _statuses(url: str, ids: list[str]) -> dict[str, tuple[str, int]]:
    backend = await rq.connect(url)
    try:
        found: dict[str, tuple[str, int]] = {}
        for activity_id in ids:
            snap = await backend.get_activity(activity_id)
            assert snap is not None
            found[activity_id] = (snap.status, snap.retry_count)
        return found
    finally:
        await backend.close()


def assert_nothing_claimed(url: str, n: int) -> None:
    """All ``n`` activities of the queue are still pending: no child claimed any."""
    stats = asyncio.run(_stats(url, QUEUE))
    assert stats.pending == n and stats.processing == 0 and stats.completed == 0, stats


class HeldConnections:
    """A TCP proxy to a server that holds every connection, unanswered, until :meth:`open` (a connect that hangs).

    Parameters
    ----------
    host, port : str, int
        The real server.
    """

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.arrived = threading.Event()
        self.opened = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, name="held-connections", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self._sockets.append(conn)
            self.arrived.set()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        self.opened.wait(60)
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            conn.close()
            return
        upstream.settimeout(None)
        self._sockets.append(upstream)
        threading.Thread(target=self._pump, args=(upstream, conn), daemon=True).start()
        self._pump(conn, upstream)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def open(self) -> None:
        """Let the held connections (and every later one) through to the server."""
        self.opened.set()

    def close(self) -> None:
        self.opened.set()
        self.listener.close()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()


@pytest.fixture
def held_pg_url(fresh_pg_url: str) -> Iterator[tuple[str, HeldConnections]]:
    """``fresh_pg_url`` reached through :class:`HeldConnections`: (the proxied URL, the proxy)."""
    parts = urlsplit(fresh_pg_url)
    proxy = HeldConnections(parts.hostname or "127.0.0.1", parts.port or 5432)
    netloc = f"{parts.username}@127.0.0.1:{proxy.port}" if parts.username else f"127.0.0.1:{proxy.port}"
    try:
        yield urlunsplit(parts._replace(netloc=netloc)), proxy
    finally:
        proxy.close()


# ------------------------------------------------------------ before the engine
@pytest.mark.slow  # bounded by the interpreter's start-up until the package's first import: tight on a loaded machine
def test_children_killed_while_they_import_the_package_are_gone_at_once(
    start: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    # SIGKILL as soon as the supervisor started both children: they are still importing runnerq_fast
    url = sqlite_url(tmp_path)
    run_dir = tmp_path / "ran"
    run_dir.mkdir()
    asyncio.run(_enqueue(url, QUEUE, 20, run_dir))
    w = start("--backend", url, "--processes", "2")
    pids = wait_for_children(w, 2)
    _, gone_after = kill_supervisor(w, pids)
    assert_gone_in_time(w, pids, gone_after)
    assert_nothing_claimed(url, 20)


@pytest.mark.slow
def test_children_killed_while_they_import_the_app_are_gone_in_time_and_claim_nothing(
    start: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    url = sqlite_url(tmp_path)
    run_dir = tmp_path / "ran"
    run_dir.mkdir()
    gate = tmp_path / "gate"
    gate.mkdir()
    asyncio.run(_enqueue(url, QUEUE, 20, run_dir))
    w = start("--backend", url, "--processes", "2", env={"SUPERVISED_APP_IMPORT_GATE": str(gate)})
    pids = wait_for_children(w, 2)
    deadline = time.monotonic() + 20
    while not all((gate / f"{pid}.importing").exists() for pid in pids):  # both are inside the app's import
        assert time.monotonic() < deadline, w.log()
        time.sleep(0.01)
    _, gone_after = kill_supervisor(w, pids)
    (gate / "open").touch()  # a child still alive would now finish its import, start and claim
    assert_gone_in_time(w, pids, gone_after)
    time.sleep(1.0)
    assert_nothing_claimed(url, 20)
    assert not ran(run_dir)


@pytest.mark.slow
def test_children_killed_while_their_engine_migrates_sqlite_are_gone_in_time_and_claim_nothing(
    start: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    url = sqlite_url(tmp_path)
    run_dir = tmp_path / "ran"
    run_dir.mkdir()
    asyncio.run(_enqueue(url, QUEUE, 20, run_dir))
    db = str(tmp_path / "queue.db")
    lock = sqlite3.connect(db, isolation_level=None)
    try:
        lock.execute("BEGIN IMMEDIATE")  # the children's engine.start() waits for this write lock to migrate
        w = start("--backend", url, "--processes", "2")
        pids = wait_for_children(w, 2)
        deadline = time.monotonic() + 20
        while not all(any(t.startswith(db) for t in fd_targets(pid)) for pid in pids):
            assert time.monotonic() < deadline, w.log()
            time.sleep(0.01)
        _, gone_after = kill_supervisor(w, pids)
    finally:
        lock.execute("ROLLBACK")  # a child still alive would now migrate, start and claim
        lock.close()
    assert_gone_in_time(w, pids, gone_after)
    time.sleep(1.0)
    assert_nothing_claimed(url, 20)
    assert not ran(run_dir)


@pytest.mark.slow
@pytest.mark.postgres
def test_children_killed_while_they_connect_to_postgresql_are_gone_in_time_and_claim_nothing(
    start: Callable[..., WorkerProcess], fresh_pg_url: str, held_pg_url: tuple[str, HeldConnections],
    tmp_path: Path,
) -> None:
    url, proxy = held_pg_url
    run_dir = tmp_path / "ran"
    run_dir.mkdir()
    asyncio.run(_enqueue(fresh_pg_url, QUEUE, 20, run_dir))
    w = start("--backend", url, "--processes", "2")
    pids = wait_for_children(w, 2)
    assert proxy.arrived.wait(20), w.log()
    time.sleep(0.2)  # the second child's connection too (it started at the same time)
    _, gone_after = kill_supervisor(w, pids)
    proxy.open()  # a child still alive would now connect, migrate, start and claim
    assert_gone_in_time(w, pids, gone_after)
    time.sleep(1.0)
    assert_nothing_claimed(fresh_pg_url, 20)
    assert not ran(run_dir)


# ---------------------------------------------------------------- running
def _killed_while_running(start: Callable[..., WorkerProcess], url: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "ran"
    run_dir.mkdir()
    # two long activities first (the first child to start claims both), then a stream of short ones that
    # keeps both children claiming
    long_ids = asyncio.run(_enqueue(url, QUEUE, 2, run_dir, sleep=30))
    short_ids = asyncio.run(_enqueue(url, QUEUE, 1000, run_dir, sleep=0.02, batch=500))
    w = start("--backend", url, "--processes", "2", "--concurrency", "3")
    wait_for_engines(w, 2)
    pids = child_pids(w)
    deadline = time.monotonic() + 20
    while True:
        by_pid = ran(run_dir)
        started = {i for done in by_pid.values() for i in done}
        if len(by_pid) == 2 and set(long_ids) <= started:
            break
        assert time.monotonic() < deadline, (by_pid.keys(), w.log())
        time.sleep(0.01)
    kill_ms, gone_after = kill_supervisor(w, pids)
    assert_gone_in_time(w, pids, gone_after)
    log = w.log()
    noticed = {int(m[2]): _log_ms(m[1]) for m in re.finditer(
        rf"^(\S+ \S+) WARNING \[(\d+)\] runnerq_fast\.supervisor: worker process \d+: supervisor {w.pid} is gone",
        log, re.MULTILINE)}
    assert sorted(noticed) == sorted(pids), log
    print("each child noticed", sorted(round(at - kill_ms) for at in noticed.values()), "ms after the kill")
    stats = asyncio.run(_stats(url, QUEUE))
    assert stats.processing == 0 and stats.completed + stats.pending == 1002, stats
    # the long ones were cancelled and released: pending again, no attempt counted
    assert asyncio.run(_statuses(url, long_ids)) == {i: ("pending", 0) for i in long_ids}
    # nothing a child claimed after it noticed ran (a claim landing after that was released, not run)
    engines = {m[2]: int(m[1]) for m in re.finditer(r"\[(\d+)\] runnerq_fast\.engine: engine (\S+) started", log)}
    ran_ids = [i for done in ran(run_dir).values() for i in done]
    assert set(ran_ids) <= set(long_ids) | set(short_ids)
    late = [(activity_id, at - noticed[engines[worker]])
            for activity_id, worker, at in asyncio.run(_claims(url, ran_ids)) if at > noticed[engines[worker]]]
    assert late == [], late


def test_children_killed_while_running_are_gone_in_time_and_release_their_work(
    start: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    _killed_while_running(start, sqlite_url(tmp_path), tmp_path)


@pytest.mark.slow
@pytest.mark.postgres
def test_children_killed_while_running_on_postgresql_are_gone_in_time_and_release_their_work(
    start: Callable[..., WorkerProcess], fresh_pg_url: str, tmp_path: Path
) -> None:
    _killed_while_running(start, fresh_pg_url, tmp_path)


# ------------------------------------------------------------ forkserver
@pytest.mark.slow
def test_forkserver_children_serve_and_are_gone_in_time_when_their_supervisor_is_killed(tmp_path: Path) -> None:
    # a forkserver child's parent is the fork server, which outlives the supervisor while children run: the
    # children watch the supervisor's pipe (before, they took the fork server for a new parent at once,
    # stopped, and were restarted in a loop)
    url = sqlite_url(tmp_path)
    run_dir = tmp_path / "ran"
    run_dir.mkdir()
    log_path = tmp_path / "forkserver.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "forkserver_supervisor.py", url], cwd=HERE, env=subprocess_env(),
                                stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while "runnerq_fast.engine: engine " not in log_path.read_text():
                assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.02)
            asyncio.run(_enqueue(url, QUEUE, 50, run_dir))
            wait_drained(url, QUEUE, 50, timeout=20)
            log = log_path.read_text()
            assert "is gone" not in log and "without being asked" not in log, log
            pids = [int(m[2]) for m in re.finditer(r"worker process (\d+) started \(pid (\d+)\)", log)]
            assert len(pids) == 1 and set(ran(run_dir)) == set(pids), log
            began = time.monotonic()
            proc.send_signal(signal.SIGKILL)
            while alive(pids[0]) and time.monotonic() - began < 20:
                time.sleep(0.002)
            gone_after = time.monotonic() - began
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
    assert gone_after <= ORPHAN_DEADLINE, (gone_after, log_path.read_text())
    print(f"the forkserver child was gone {gone_after * 1000:.0f} ms after the supervisor's SIGKILL")
