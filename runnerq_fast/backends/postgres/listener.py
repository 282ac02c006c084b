"""A LISTEN connection that reconnects by itself.

One dedicated connection per backend (outside the pool, so a busy pool never
delays a wakeup). When the connection drops (server restart,
``pg_terminate_backend``, network) it reconnects with exponential backoff and
then calls ``on_reconnect`` so the backend can wake everything that might have
missed a notification while it was away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

import asyncpg

__all__ = ["Listener"]

log = logging.getLogger(__name__)

NotifyCallback = Callable[[str, str], None]
"""``(channel, payload)``; called in the event loop, must not block."""


class Listener:
    """LISTEN on some channels over one self-healing connection.

    Parameters
    ----------
    connect : callable
        Coroutine function opening a fresh :class:`asyncpg.Connection`.
    channels : sequence of str
        Channels to LISTEN on.
    on_notify : callable
        ``on_notify(channel, payload)`` for each notification.
    on_reconnect : callable
        Called after a reconnect (not after the first connect).
    keepalive : float
        Seconds between liveness probes of an idle connection. Default 5 s.
    max_backoff : float
        Longest pause between reconnect attempts, in seconds. Default 2 s.
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        channels: Sequence[str],
        on_notify: NotifyCallback,
        on_reconnect: Callable[[], None],
        *,
        keepalive: float = 5.0,
        max_backoff: float = 2.0,
    ) -> None:
        self._connect = connect
        self._channels = tuple(channels)
        self._on_notify = on_notify
        self._on_reconnect = on_reconnect
        self._keepalive = keepalive
        self._max_backoff = max_backoff
        self._conn: asyncpg.Connection | None = None
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        #: Number of successful connects, the first included (for tests and logs).
        self.connects = 0

    @property
    def server_pid(self) -> int | None:
        """Server process id of the current connection, ``None`` while disconnected."""
        conn = self._conn
        return None if conn is None or conn.is_closed() else conn.get_server_pid()

    async def start(self) -> None:
        """Connect once (errors propagate) and start the supervising task."""
        await self._open()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="runnerq-pg-listener")

    async def close(self) -> None:
        """Stop reconnecting and close the connection. Idempotent."""
        self._closed = True
        self._lost.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._drop()

    def _notified(self, _conn: object, _pid: int, channel: str, payload: object) -> None:
        try:
            self._on_notify(channel, str(payload))
        except Exception:  # a callback bug must not kill the listener
            log.exception("notification callback failed")

    def _terminated(self, _conn: object) -> None:
        self._lost.set()

    async def _open(self) -> None:
        conn = await self._connect()
        try:
            for channel in self._channels:
                await conn.add_listener(channel, self._notified)
        except BaseException:
            conn.terminate()
            raise
        self._lost.clear()
        conn.add_termination_listener(self._terminated)
        self._conn = conn
        self.connects += 1

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        conn.remove_termination_listener(self._terminated)
        if conn.is_closed():
            return
        try:
            await asyncio.wait_for(conn.close(), 1.0)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
            conn.terminate()

    async def _alive(self) -> bool:
        conn = self._conn
        if conn is None or conn.is_closed():
            return False
        try:
            await conn.fetchval("SELECT 1", timeout=self._keepalive)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
            return False
        return True

    async def _run(self) -> None:
        backoff = 0.05
        while not self._closed:
            try:
                await asyncio.wait_for(self._lost.wait(), self._keepalive)
            except TimeoutError:
                if await self._alive():
                    continue
            if self._closed:
                return
            log.warning("LISTEN connection lost; reconnecting")
            await self._drop()
            while not self._closed:
                try:
                    await self._open()
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
                    # the loss was logged once above; each failed attempt is detail
                    log.debug("LISTEN reconnect failed (%s); retrying in %.2f s", exc, backoff)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, self._max_backoff)
                    continue
                backoff = 0.05
                log.info("LISTEN connection re-established")
                try:
                    self._on_reconnect()
                except Exception:
                    log.exception("reconnect callback failed")
                break
