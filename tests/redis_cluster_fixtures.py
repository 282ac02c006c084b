"""Fixtures for tests against a real Redis Cluster that the tests start (a pytest plugin).

Registered by ``pytest_plugins`` in ``tests/conftest.py``: ``redis_cluster``
(session-scoped: six ``redis-server --cluster-enabled yes`` on local ports,
three masters each with a replica, made a cluster by
``redis-cli --cluster create``), ``redis_cluster_url``,
``redis_cluster_namespace`` and ``redis_cluster_backend``.

The ports are ``RUNNERQ_TEST_CLUSTER_PORT`` (default 7110) and the five after
it, far from 6379 and from the free ports the fault tests pick; under pytest-xdist
worker ``gwN`` adds ``10 * N`` (each worker process has a cluster of its own). A node timeout
of 1 s makes a replica take over a dead master in about 2 s. Each test gets a
fresh key namespace; its keys are deleted from every master afterwards.

If ``redis-server``/``redis-cli`` are missing or the cluster does not come up,
the tests are skipped, unless ``CI=true``: then they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from redis.asyncio.cluster import RedisCluster

from runnerq_fast.backends.redis.cluster import RedisClusterBackend

# pytest-xdist's worker gwN (N = 0, 1, ...) takes the ten ports 10 * N above the base: one cluster per worker
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
BASE_PORT = int(os.environ.get("RUNNERQ_TEST_CLUSTER_PORT", "7110")) + 10 * int(_WORKER.removeprefix("gw") or 0)
NODES = 6
NODE_TIMEOUT_MS = 1000


@dataclass
class LocalCluster:
    """A Redis Cluster of local ``redis-server`` processes (three masters, three replicas)."""

    ports: list[int]
    workdir: Path
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """``redis+cluster://`` URL naming every node."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def start_node(self, port: int) -> None:
        """Start (or restart, keeping its ``nodes.conf``) the node on ``port``."""
        d = self.workdir / str(port)
        d.mkdir(exist_ok=True)
        self.procs[port] = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
             # a replica always takes over (by default one that lost its master's link for > 10 node
             # timeouts + 10 s refuses; a loaded test machine gets there)
             "--cluster-replica-validity-factor", "0",
             "--save", "", "--appendonly", "no", "--logfile", "redis.log", "--dir", str(d)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def cli(self, port: int, *args: str, timeout: float = 10.0) -> str:
        """Run ``redis-cli -p port args...`` and return its output."""
        out = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, timeout=timeout, check=False)
        return out.stdout.decode()

    def role(self, port: int) -> str:
        """``master`` or ``slave`` (``""`` if the node does not answer)."""
        for line in self.cli(port, "ROLE", timeout=3).splitlines():
            return line.strip()
        return ""

    def masters(self) -> list[int]:
        """Ports of the masters that answer, by ``ROLE``."""
        return [p for p in self.ports if p in self.procs and self.procs[p].poll() is None and self.role(p) == "master"]

    def master_of_slot(self, slot: int) -> int:
        """Port of the master serving ``slot`` (by ``CLUSTER SLOTS`` of a live node)."""
        for p in self.ports:
            if self.procs.get(p) is None or self.procs[p].poll() is not None:
                continue
            lines = self.cli(p, "CLUSTER", "SLOTS", timeout=3).split()
            # flat text: start end host port id [host port id]... per range
            i = 0
            while i + 3 < len(lines):
                if lines[i].isdigit() and lines[i + 1].isdigit() and lines[i + 3].isdigit():
                    lo, hi, port = int(lines[i]), int(lines[i + 1]), int(lines[i + 3])
                    if lo <= slot <= hi:
                        return port
                i += 1
        raise AssertionError(f"no node serves slot {slot}")

    def replica_of(self, master: int) -> int:
        """Port of a replica of the master on ``master``."""
        node_id = self.cli(master, "CLUSTER", "MYID").strip()
        for line in self.cli(master, "CLUSTER", "REPLICAS", node_id).splitlines():
            for word in line.split():
                if word.startswith("127.0.0.1:"):
                    return int(word.split(":")[1].split("@")[0])
        raise AssertionError(f"master {master} has no replica")

    def info_field(self, port: int, name: str) -> str:
        """One field of ``INFO replication`` of the node on ``port`` (``""`` if absent)."""
        for line in self.cli(port, "INFO", "replication", timeout=3).splitlines():
            key, _, value = line.strip().partition(":")
            if key == name:
                return value
        return ""

    def wait_synced(self, master: int, timeout: float = 30.0) -> None:
        """Wait until every replica of ``master`` has its initial sync done and what the master wrote so far."""
        target = int(self.info_field(master, "master_repl_offset") or 0)
        replica = self.replica_of(master)
        deadline = time.monotonic() + timeout
        while not (self.info_field(replica, "master_link_status") == "up"
                   and int(self.info_field(replica, "slave_repl_offset") or 0) >= target):
            if time.monotonic() > deadline:
                raise RuntimeError(f"replica {replica} of {master} did not catch up within {timeout} s")
            time.sleep(0.05)

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Wait until every live node says ``cluster_state:ok`` and sees 3 masters."""
        deadline = time.monotonic() + timeout
        while True:
            live = [p for p in self.ports if self.procs.get(p) is not None and self.procs[p].poll() is None]
            states = [self.cli(p, "CLUSTER", "INFO", timeout=3) for p in live]
            if live and all("cluster_state:ok" in s for s in states):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Redis Cluster not ok after {timeout} s: {[s[:40] for s in states]}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Kill every node."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            proc.wait(timeout=10)


def _start() -> LocalCluster:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        raise RuntimeError("redis-server and redis-cli are needed for the Redis Cluster tests")
    cluster = LocalCluster(list(range(BASE_PORT, BASE_PORT + NODES)), Path(tempfile.mkdtemp(prefix="rq-cluster-")))
    try:
        for p in cluster.ports:
            cluster.start_node(p)
        deadline = time.monotonic() + 10
        while not all(cluster.cli(p, "PING", timeout=2).strip() == "PONG" for p in cluster.ports):
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on ports {cluster.ports} (in use?)")
            time.sleep(0.05)
        out = subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in cluster.ports),
             "--cluster-replicas", "1", "--cluster-yes"],
            capture_output=True, timeout=60, check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {out.stdout.decode()[-500:]}")
        cluster.wait_ok()
        # every replica attached and through its initial sync (a replica promoted before has no data)
        deadline = time.monotonic() + 30
        while sum(1 for p in cluster.ports if cluster.role(p) == "slave") < NODES // 2:
            if time.monotonic() > deadline:
                raise RuntimeError("the replicas did not attach")
            time.sleep(0.1)
        for master in cluster.masters():
            cluster.wait_synced(master)
    except BaseException:
        cluster.stop()
        shutil.rmtree(cluster.workdir, ignore_errors=True)
        raise
    return cluster


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """A Redis Cluster on local ports for the whole session (skipped if it cannot start, failed on CI)."""
    try:
        cluster = _start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        message = f"cannot start a local Redis Cluster: {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.workdir, ignore_errors=True)


@pytest.fixture
def redis_cluster_url(redis_cluster: LocalCluster) -> str:
    """URL of the test cluster."""
    redis_cluster.wait_ok()  # a failover test may have left it converging
    return redis_cluster.url


async def delete_cluster_namespace(url: str, namespace: str) -> int:
    """Delete every key of ``namespace`` on every master; returns how many."""
    client = RedisCluster.from_url(url.replace("redis+cluster://", "redis://").split(",")[0])
    n = 0
    try:
        async for key in client.scan_iter(match=f"{namespace}:*", count=1000):  # SCAN of every master
            n += await client.unlink(key)
    finally:
        await client.aclose()
    return int(n)


@pytest.fixture
async def redis_cluster_namespace(redis_cluster_url: str) -> AsyncIterator[str]:
    """A fresh key namespace on the cluster, its keys deleted after the test."""
    namespace = f"rqc{uuid.uuid4().hex[:12]}"
    try:
        yield namespace
    finally:
        await delete_cluster_namespace(redis_cluster_url, namespace)


@pytest.fixture
async def redis_cluster_backend(
    redis_cluster_url: str, redis_cluster_namespace: str
) -> AsyncIterator[RedisClusterBackend]:
    """An opened :class:`RedisClusterBackend` in a fresh namespace."""
    backend = await RedisClusterBackend.open(redis_cluster_url, namespace=redis_cluster_namespace)
    try:
        yield backend
    finally:
        await backend.close()
