"""Redis Cluster: :class:`RedisClusterBackend` (``redis+cluster://`` and ``rediss+cluster://`` URLs).

The same backend as :class:`~runnerq_fast.backends.redis.RedisBackend`, on
redis-py's asyncio :class:`~redis.asyncio.cluster.RedisCluster`. Every key of
a queue carries the hash tag ``{<queue>}`` (:mod:`.keys`), so each queue lives
in one slot, on one master, and every Lua script, pipeline and blocking pop
of the queue touches that slot only. What differs from one server:

- the scripts are loaded on every master (``SCRIPT LOAD`` to all primaries),
  and again on a master that answers ``NOSCRIPT`` (a promoted replica);
- the enqueue pipeline sends ``EVALSHA`` as a raw command (redis-py's cluster
  pipeline refuses its ``evalsha`` method, not the command) beside the
  ``SADD`` of the queue registry, which is one key outside any hash tag:
  redis-py splits a cluster pipeline per node, so no command spans slots;
- ``maxmemory-policy`` is checked on every master (by a worker's start, once per cluster and process);
- result waiters keep one ``PSUBSCRIBE`` on one node: a classic ``PUBLISH``
  (the scripts' ``done`` notifications) reaches every node of a cluster, so
  one subscription hears every queue on every master (sharded pub/sub has no
  pattern subscribe, and the waiters do not know the queues in advance);
- the activity id -> queue lookup (``_locate``) reads the queue registry and
  pipelines one ``HMGET`` per queue, each in that queue's own slot.

A master failover is seen by redis-py as a lost connection or a ``MOVED``
reply; it refreshes its slot map and the backend's callers retry as they do
for one server (see :mod:`runnerq_fast.resilience`). Replication is
asynchronous: what a master acknowledged but had not yet sent to its replica
is lost when the replica takes over (README, "Redis Cluster").
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import unquote

from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, RedisClusterException, RedisError, ResponseError

from runnerq_fast.backends.redis import keys
from runnerq_fast.backends.redis.backend import (
    DEFAULT_RESULT_TTL,
    RedisBackend,
    _HiredisPackingConnection,
    _s,
    check_open_options,
    log,
)
from runnerq_fast.backends.redis.guard import guarded
from runnerq_fast.errors import BackendError, ConfigError
from runnerq_fast.urls import redact_text, redact_url

__all__ = ["CLUSTER_SCHEMES", "RedisClusterBackend", "parse_cluster_url"]

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
"""URL schemes of a Redis Cluster (``rediss+cluster`` for TLS)."""


def parse_cluster_url(url: str) -> tuple[list[tuple[str, int]], str | None, str | None, bool]:
    """The startup nodes, user name, password and TLS flag of a cluster URL.

    Parameters
    ----------
    url : str
        ``redis+cluster://[[user]:password@]host:port[,host:port...][/0]``
        (``rediss+cluster://`` for TLS). A port left out is 6379; IPv6
        hosts go in brackets (``[::1]:7000``). Any one reachable node is
        enough (the others are discovered), more make the first connect
        survive a node being down.

    Returns
    -------
    tuple
        ``([(host, port), ...], username or None, password or None, tls)``.

    Raises
    ------
    ConfigError
        If the scheme is not a cluster scheme, no node is given, a port is
        not a number in 1..65535, a database other than 0 is named (a
        cluster has only database 0) or a query string is given (no option
        is read from the URL: pass them to :meth:`RedisClusterBackend.open`).
    """
    shown = redact_url(url)
    head, sep, rest = url.partition("://")
    scheme = head.lower()
    if not sep or scheme not in CLUSTER_SCHEMES:
        raise ConfigError(f"not a Redis Cluster URL: {shown!r} (expected redis+cluster://host:port,...)")
    netloc, _, tail = rest.partition("/")
    if "?" in netloc or "#" in netloc or "?" in tail or "#" in tail:
        raise ConfigError(f"invalid Redis Cluster URL {shown!r}: no query options are read from the URL")
    if tail.strip("/") not in ("", "0"):
        raise ConfigError(f"invalid Redis Cluster URL {shown!r}: a cluster has only database 0")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    nodes: list[tuple[str, int]] = []
    for part in hosts.split(","):
        part = part.strip()
        if not part:
            continue
        if part.startswith("["):
            host, _, after = part[1:].partition("]")
            port_text = after[1:] if after.startswith(":") else after
        else:
            host, _, port_text = part.rpartition(":") if ":" in part else (part, "", "")
        port_text = port_text or "6379"
        if not host or not (port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536):
            raise ConfigError(f"invalid Redis Cluster URL {shown!r}: bad node {redact_text(part, url)!r}")
        nodes.append((host, int(port_text)))
    if not nodes:
        raise ConfigError(f"invalid Redis Cluster URL {shown!r}: no node given")
    return nodes, username, password, scheme == "rediss+cluster"


class RedisClusterBackend(RedisBackend):
    """:class:`~runnerq_fast.backends.redis.RedisBackend` on a Redis Cluster (7.0 or later).

    Open it with :meth:`open` (or ``rq.connect("redis+cluster://host:7000,host:7001")``).
    A queue lives in one slot, so one queue's throughput is at most one
    master's; queues spread over the masters.
    """

    #: Pack commands with hiredis on plain-TCP connections (see ``_HiredisPackingConnection``).
    _hiredis_packing = True

    @classmethod
    async def open(
        cls,
        url: str,
        result_ttl: float = DEFAULT_RESULT_TTL,
        max_connections: int = 64,
        namespace: str = keys.DEFAULT_NAMESPACE,
        pool_timeout: float = 20.0,
    ) -> RedisClusterBackend:
        """Discover the cluster and load the scripts on every master (a worker checks the eviction policy).

        Parameters
        ----------
        url : str
            ``redis+cluster://[[user]:password@]host:port[,host:port...]``
            or ``rediss+cluster://...`` (TLS, certificates verified against
            the system's CAs); see :func:`parse_cluster_url`.
        result_ttl : float
            Seconds a finished activity and its result are kept (default 86,400).
        max_connections : int
            Connections per node (blocking calls each hold one). A call that
            finds every connection of its node busy fails with a fault that
            the callers retry (redis-py's cluster pools do not wait). Default 64.
        namespace : str
            First part of every key (default ``rq``); no ``{``, ``}`` or ``:``.
        pool_timeout : float
            Accepted for the same signature as the single-server backend;
            must be positive (seconds), otherwise unused.

        Raises
        ------
        ConfigError
            If the URL is not a cluster URL, ``result_ttl`` or
            ``pool_timeout`` is not positive or ``namespace`` is not a plain word.
        BackendError
            If no node can be reached or the cluster is not usable (e.g. not
            every slot is served).
        """
        nodes, username, password, tls = parse_cluster_url(url)
        check_open_options(namespace, result_ttl, pool_timeout)
        if not max_connections > 0:
            raise ConfigError(f"max_connections must be positive, got {max_connections!r}")
        client = RedisCluster(
            startup_nodes=[ClusterNode(h, p) for h, p in nodes],
            username=username,
            password=password,
            ssl=tls,
            decode_responses=False,
            max_connections=max_connections,
            socket_connect_timeout=5,
            # as on one server: no resend by redis-py (a script whose reply was lost may have run);
            # MOVED/ASK redirects are followed all the same, and a lost node makes the next call
            # rediscover the slot map
            retry=Retry(NoBackoff(), 0),
        )
        kwargs = getattr(client, "connection_kwargs", None)
        if cls._hiredis_packing and not tls and isinstance(kwargs, dict):
            # every node's connections pack with hiredis, as on one server (the nodes found at
            # discovery are built from these arguments; RedisCluster takes no connection_class)
            kwargs["connection_class"] = _HiredisPackingConnection
        backend = cls(url, client, result_ttl, namespace)  # type: ignore[arg-type]
        try:
            await guarded(client.initialize())
            await backend._load_scripts()
        except (RedisError, RedisClusterException, OSError, BackendError) as exc:
            await client.aclose()
            raise BackendError(f"cannot use Redis Cluster at {redact_url(url)}: {redact_text(str(exc), url)}") from exc
        backend._listener = asyncio.create_task(backend._listen(), name="runnerq-redis-results")
        return backend

    @property
    def cluster(self) -> RedisCluster:
        """The redis-py cluster client (for tests and tools)."""
        client: RedisCluster = self._r
        return client

    async def check_eviction_policy(self) -> str | None:
        """Warn unless every master's ``maxmemory-policy`` is ``noeviction``.

        Warns on every call: ``check_server`` (a worker's start) calls it once
        per cluster and process. Returns the first policy that is not ``noeviction`` (else
        ``"noeviction"``), or ``None`` if ``CONFIG GET`` is not allowed
        (managed services), which is logged too.
        """
        try:
            reply = await guarded(self._r.config_get("maxmemory-policy", target_nodes=RedisCluster.PRIMARIES))
        except ResponseError as exc:
            log.warning("cannot read Redis maxmemory-policy (%s); make sure it is 'noeviction' on every master", exc)
            return None
        # one master answers with its own dict, several with {node name: dict}
        per_node = reply if all(isinstance(v, dict) for v in reply.values()) else {"": reply}
        worst = "noeviction"
        for node, conf in per_node.items():
            policy = _s(conf.get("maxmemory-policy") or conf.get(b"maxmemory-policy"))
            if policy != "noeviction":
                worst = policy or "?"
                log.warning(
                    "Redis maxmemory-policy of master %s is %r: keys (queued activities!) may be evicted under "
                    "memory pressure; set it to 'noeviction'",
                    node or "(the only one)",
                    policy,
                )
        return worst

    async def _load_scripts(self) -> None:
        """Load every script on every master (``SCRIPT LOAD`` goes to all primaries)."""
        for name, src in self._src.items():
            sha = await guarded(self._r.script_load(src))
            if _s(sha) != self._sha[name]:  # pragma: no cover - a server bug
                raise BackendError(f"Redis returned SHA {sha!r} for script {name}, expected {self._sha[name]}")

    async def _enqueue_chunks(self, queue: str, chunks: list[list[Any]]) -> list[Any]:
        # As on one server (the queue registry is written with every enqueue), but EVALSHA goes as a
        # raw command: redis-py's cluster pipeline refuses its evalsha() method, not the command.
        prefix = keys.prefix(self._ns, queue)
        for attempt in (1, 2):
            try:
                async with self._r.pipeline(transaction=False) as pipe:
                    pipe.sadd(keys.queues(self._ns), queue)
                    for args in chunks:
                        pipe.execute_command("EVALSHA", self._sha["enqueue"], 1, prefix, *args)
                    replies = await guarded(pipe.execute())
                return list(replies[1:])
            except NoScriptError:
                if attempt == 2:
                    raise
                log.info("a Redis master lost the runnerq scripts (failover, restart or SCRIPT FLUSH); reloading them")
                await self._load_scripts()
        raise AssertionError("unreachable")  # pragma: no cover
