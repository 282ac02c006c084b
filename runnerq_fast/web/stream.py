"""The live event stream: one shared reader per queue, fanned out to every client as Server-Sent Events.

Each event goes out as ``id: <event id>`` + ``data: <StreamEventView JSON>`` (an
EventView without the failed attempt's traceback), so
``Last-Event-ID`` (or ``?after=``) resumes with no gap and no duplicate: the
ids are the store's own, and ``Backend.event_stream(queue, after_id)``
replays what was stored after one, also after a server restart. The stream
opens with ``retry:`` (reconnect delay), sends a ``: keepalive`` comment
after each idle interval (15 s), and is served with ``Cache-Control:
no-cache`` and ``X-Accel-Buffering: no`` so proxies pass it through.

Fan-out. A :class:`StreamHub` per queue reads ``Backend.event_stream`` once
for every client of that queue and encodes each event's SSE bytes once, into
a ring of the last ``history`` events. A client holds only its position in
the ring: its backlog is what lies between its position and the newest
event, at most ``history`` events whatever the number of clients, and a
writer sends all of it as one chunk. Clients are woken at most once per
``flush_interval`` (0.1 s) under a steady flow of events; an event after a
quiet spell goes out at once. The reader stops ``grace`` seconds after its
last client left, and the next client starts a fresh one.

Resume. A client whose ``Last-Event-ID`` is still in the ring joins it
right after that event. Otherwise it replays from the store with a reader
of its own while the ring keeps what arrives from the moment it joined;
the first replayed event the ring also holds (or the ring reaching the last
replayed event) hands it over to the ring, past that event, and the private
reader closes: no gap, no duplicate, whichever of the two readers is ahead.

Falling behind. A client whose next event has left the ring (its socket
took less than ``history`` events in the time the queue wrote them) is
dropped: it gets ``event: resync`` whose ``id:`` and ``last_event_id`` are
the newest event the server had read, and the stream ends. Neither the
reader nor other clients ever wait for it. A failing backend read ends every
client of the queue with ``event: error``.

Transport: a Starlette ``StreamingResponse``, measured against sse-starlette
(``benchmarks/sse_transport.py``: about 10x less server CPU per event with the
buffered events joined into one chunk); fan-out measured by
``benchmarks/sse_fanout.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from starlette.requests import Request
from starlette.responses import StreamingResponse

from runnerq_fast.models import ActivityEvent
from runnerq_fast.web.responses import ProblemError
from runnerq_fast.web.wire import encode, stream_event_view

__all__ = ["SSE_HEADERS", "EventStream", "StreamHub", "format_event", "parse_resume_id"]

log = logging.getLogger("runnerq_fast.web")

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "Connection": "keep-alive"}
"""Headers every stream is sent with."""

_ERROR = b'event: error\ndata: {"reason":"the backend event stream failed; reconnect"}\n\n'
_KEEPALIVE = b": keepalive\n\n"

Opener = Callable[[int | None], AsyncIterator[ActivityEvent]]
"""``after_id -> events``: the backend's ``event_stream`` of one queue."""


def parse_resume_id(request: Request) -> int | None:
    """The event id to resume after: ``Last-Event-ID`` header, else ``?after=``, else ``None`` (live only).

    Raises
    ------
    ProblemError
        422 when the id is not a non-negative integer in ASCII digits (``?after=`` with no value included).
    """
    text = request.headers.get("last-event-id")
    if text is None or not text.strip():
        text = request.query_params.get("after")
    if text is None:
        return None
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or int(text) >= 2**63:
        raise ProblemError(
            422, f"the event id to resume after must be an integer from 0 to {2**63 - 1}, got {text!r}"
        )
    return int(text)


def format_event(ev: ActivityEvent) -> bytes:
    """One event in SSE framing: ``id: <id>\\ndata: <StreamEventView JSON>\\n\\n`` (no traceback)."""
    return b"id: %d\ndata: %s\n\n" % (ev.id, encode(stream_event_view(ev)))


def resync_message(last_event_id: int) -> bytes:
    """The ``event: resync`` message that ends the stream of a client which fell behind."""
    return (
        b'event: resync\nid: %d\ndata: {"reason":"the client fell behind; refetch and reconnect",'
        b'"last_event_id":%d}\n\n' % (last_event_id, last_event_id)
    )


async def _aclose(source: AsyncIterator[ActivityEvent]) -> None:
    aclose = getattr(source, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(BaseException):
            await aclose()


class StreamHub:
    """One queue's live events, read once from the backend and shared by every stream client.

    Parameters
    ----------
    open_source : callable
        ``after_id -> async iterator of ActivityEvent``: the queue's
        ``Backend.event_stream``. The hub opens it once with ``None`` (live
        from now); a resuming client opens its own replay with its id.
    history : int
        Events kept in the ring: the most a client may lag before it is told
        to resync, and the window a ``Last-Event-ID`` resumes from without a
        replay. Default 10,000.
    flush_interval : float
        Shortest time between two wakeups of the clients while events flow,
        seconds. Default 0.1.
    keepalive : float
        Seconds of silence after which every client gets ``: keepalive``. Default 15.
    grace : float
        Seconds the reader keeps running after its last client left. Default 2.
    stop : asyncio.Event, optional
        Ends every client (the server is shutting down) and the reader when set.
    on_close : callable, optional
        Called with the hub once its reader has stopped, so its owner forgets it.

    Raises
    ------
    ValueError
        When ``history`` < 1, ``flush_interval`` or ``grace`` < 0 or ``keepalive`` <= 0.
    """

    def __init__(self, open_source: Opener, *, history: int = 10_000, flush_interval: float = 0.1,
                 keepalive: float = 15.0, grace: float = 2.0, stop: asyncio.Event | None = None,
                 on_close: Callable[[StreamHub], None] | None = None) -> None:
        if history < 1 or flush_interval < 0 or not keepalive > 0 or grace < 0:
            raise ValueError("history must be >= 1, flush_interval and grace >= 0, keepalive > 0")
        self._open = open_source
        self.history = history
        self.flush_interval = flush_interval
        self.keepalive = keepalive
        self.grace = grace
        self._stop = stop
        self._on_close = on_close
        # the ring: seq n (1, 2, ...) is _chunks[n - _base]; only seqs > _head - history count
        self._chunks: list[bytes] = []
        self._ids: list[int] = []
        self._base = 1
        self._head = 0
        self._index: dict[int, int] = {}  # event id -> seq, for the events in _chunks
        self._joined: dict[int, bytes] = {}  # cursor -> chunk up to _joined_head
        self._joined_head = 0
        self._clients: set[EventStream] = set()
        self._loop = asyncio.get_running_loop()
        self._last_flush = -1e9
        self._flush_handle: asyncio.Handle | None = None
        self._idle_handle: asyncio.TimerHandle | None = None
        self._keepalives = 0
        #: The backend read failed with this (clients get ``event: error``).
        self.error: BaseException | None = None
        #: The reader has stopped (source ended or failed, server stopping, no client left).
        self.closed = False
        self._ended = False  # no more events will come (clients send what is left, then end)
        #: Sources this hub opened for itself (1 while it lives; for tests).
        self.opened = 0
        #: Events read from the backend by the shared reader (for tests and benchmarks).
        self.read = 0
        self._reader = self._loop.create_task(self._run(), name="runnerq-sse-hub")
        self._ticker = self._loop.create_task(self._tick(), name="runnerq-sse-keepalive")

    # ------------------------------------------------------------ the reader
    async def _run(self) -> None:
        source = self._open(None)
        self.opened += 1
        try:
            async for ev in source:
                self._append(ev)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("the event stream failed: %s: %s", type(exc).__name__, exc)
            self.error = exc
        finally:
            await _aclose(source)
            self._end()

    def _append(self, ev: ActivityEvent) -> None:
        self.read += 1
        self._head += 1
        self._chunks.append(format_event(ev))
        self._ids.append(ev.id)
        self._index[ev.id] = self._head
        if len(self._chunks) >= 2 * self.history:  # amortised: drop the oldest half at once
            drop = len(self._chunks) - self.history
            index = self._index
            for i in self._ids[:drop]:
                index.pop(i, None)
            del self._chunks[:drop], self._ids[:drop]
            self._base += drop
        if self._flush_handle is None:
            delay = self._last_flush + self.flush_interval - self._loop.time()
            self._flush_handle = (
                self._loop.call_soon(self._flush) if delay <= 0 else self._loop.call_later(delay, self._flush)
            )

    def _flush(self) -> None:
        """Wake every client; drop those whose next event has left the ring."""
        self._flush_handle = None
        self._last_flush = self._loop.time()
        oldest = self._head - self.history  # a cursor below this has lost its next event
        dropped = [c for c in self._clients if c._cursor < oldest]
        for c in dropped:
            c._resync_at = self._ids[-1]
            self._leave(c)
            c._wake.set()
        for c in self._clients:
            c._wake.set()

    async def _tick(self) -> None:
        """Keepalives after each quiet interval; the server's stop."""
        stop = self._stop or asyncio.Event()
        while True:
            try:
                await asyncio.wait_for(stop.wait(), self.keepalive)
            except TimeoutError:
                if self._loop.time() - self._last_flush >= self.keepalive:
                    self._keepalives += 1
                    for c in self._clients:
                        c._wake.set()
                continue
            self._reader.cancel()
            return

    def _end(self) -> None:
        self._ended = True
        self.close()
        for c in self._clients:
            c._wake.set()

    # ------------------------------------------------------------- clients
    def client(self, after: int | None, *, retry_ms: int = 2000,
               on_close: Callable[[EventStream], None] | None = None) -> EventStream:
        """A new client of this hub: live from now, or resuming after event ``after``.

        Raises
        ------
        RuntimeError
            When the hub is closed (ask its owner for a fresh one).
        """
        if self.closed:
            raise RuntimeError("this stream hub is closed")
        return EventStream(self, after, retry_ms=retry_ms, on_close=on_close)

    def _join(self, c: EventStream, after: int | None) -> bool:
        """Attach ``c`` at the ring's head (or right after ``after``); ``True`` when it must replay first."""
        if self._idle_handle is not None:
            self._idle_handle.cancel()
            self._idle_handle = None
        self._clients.add(c)
        if after is None:
            c._cursor = self._head
            return False
        seq = self._index.get(after)
        if seq is not None and seq >= self._head - self.history:
            c._cursor = seq
            return False
        c._cursor = self._head  # the ring keeps everything from here while the client replays
        return True

    def _leave(self, c: EventStream) -> None:
        self._clients.discard(c)
        if not self._clients and not self.closed and self._idle_handle is None:
            self._idle_handle = self._loop.call_later(self.grace, self._idle)

    def _idle(self) -> None:
        self._idle_handle = None
        if not self._clients:
            self.close()

    def close(self) -> None:
        """Stop the reader; clients send what the ring holds for them, then end."""
        if self.closed:
            return
        self.closed = True
        self._ended = True
        for h in (self._idle_handle, self._flush_handle):
            if h is not None:
                h.cancel()
        self._flush_handle = None
        self._ticker.cancel()
        if self._reader is not asyncio.current_task():
            self._reader.cancel()
        for c in self._clients:
            c._wake.set()
        if self._on_close is not None:
            self._on_close(self)

    @property
    def clients(self) -> int:
        """Clients attached now."""
        return len(self._clients)

    def _chunk_after(self, cursor: int) -> bytes:
        """Every event of the ring after seq ``cursor``, as one chunk (built once per cursor and head)."""
        if self._joined_head != self._head:
            self._joined.clear()
            self._joined_head = self._head
        chunk = self._joined.get(cursor)
        if chunk is None:
            chunk = self._joined[cursor] = b"".join(self._chunks[cursor + 1 - self._base:])
        return chunk


class EventStream:
    """One client's stream, fed by its queue's :class:`StreamHub` (see the module docstring).

    Made by :meth:`StreamHub.client`.

    Parameters
    ----------
    hub : StreamHub
        The queue's hub.
    after : int or None
        The event id to resume after (``Last-Event-ID``); ``None``: live only.
    retry_ms : int
        The reconnect delay sent to the client (``retry:``), milliseconds.
    on_close : callable, optional
        Called with the stream once it has ended and left the hub.
    """

    def __init__(self, hub: StreamHub, after: int | None, *, retry_ms: int = 2000,
                 on_close: Callable[[EventStream], None] | None = None) -> None:
        if retry_ms < 0:
            raise ValueError("retry_ms must be >= 0")
        self._hub = hub
        self._after = after
        self.retry_ms = retry_ms
        self._on_close = on_close
        self._wake = asyncio.Event()
        self._cursor = 0
        #: Set (to the newest event id read) when the client fell behind and is told to resync.
        self._resync_at: int | None = None
        self._replay_q: deque[ActivityEvent] = deque()
        self._replay_task: asyncio.Task[None] | None = None
        self._replay_room = asyncio.Event()
        self._replay_error: BaseException | None = None
        # the event ids last sent from the replay (the resume id first), newest last
        self._recent: deque[int] = deque(() if after is None else (after,), maxlen=hub.history)
        #: Events sent to the client.
        self.sent = 0
        #: Events sent from the client's own replay (before it joined the ring).
        self.replayed = 0

    def response(self) -> StreamingResponse:
        """The streaming response (``text/event-stream``)."""
        return StreamingResponse(self._body(), media_type="text/event-stream", headers=SSE_HEADERS)

    @property
    def replaying(self) -> bool:
        """Whether the client still reads its own replay from the store."""
        return self._replay_task is not None

    async def _replay(self, after: int) -> None:
        source = self._hub._open(after)
        room, q, cap = self._replay_room, self._replay_q, self._hub.history
        try:
            async for ev in source:
                if self._replay_task is None:  # handed over: a cancel that did not land ends it here
                    break
                while len(q) >= cap:  # the client is slow: wait (the ring tells it to resync if too slow)
                    room.clear()
                    await room.wait()
                q.append(ev)
                self._wake.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("the event stream replay failed: %s: %s", type(exc).__name__, exc)
            self._replay_error = exc
            self._wake.set()
        finally:
            await _aclose(source)

    def _stop_replay(self) -> None:
        if self._replay_task is not None:
            self._replay_task.cancel()
            self._replay_task = None
        self._replay_q.clear()

    def _take_replay(self) -> bytes:
        """What the replay read since the last call, up to where the ring takes over.

        The ring and the replay hold the store's events in the same order, so
        once the ring holds a replayed event at seq ``s``, the ring's events
        after it are the ones replayed after it, then the rest: the client
        continues from the ring at ``s`` plus the number replayed since.
        """
        index, join_at = self._hub._index, self._cursor
        q, recent = self._replay_q, self._recent
        parts: list[bytes] = []
        while q:
            ev = q.popleft()
            seq = index.get(ev.id)
            if seq is not None and seq > join_at:  # the ring holds it for this client: hand over before it
                self._cursor = seq - 1
                self._stop_replay()
                break
            parts.append(format_event(ev))
            recent.append(ev.id)
        else:
            # the ring caught up with (some of) what was replayed: the newest replayed event it holds
            for back, i in enumerate(reversed(recent)):
                seq = index.get(i)
                if seq is not None:
                    if seq >= join_at:
                        self._cursor = seq + back
                        self._stop_replay()
                    break
        self._replay_room.set()
        self.replayed += len(parts)
        self.sent += len(parts)
        return b"".join(parts)

    async def _body(self) -> AsyncGenerator[bytes]:
        hub, wake = self._hub, self._wake
        try:
            if hub._join(self, self._after):
                assert self._after is not None
                self._replay_task = asyncio.get_running_loop().create_task(self._replay(self._after))
            keepalives = hub._keepalives
            yield b"retry: %d\n\n" % self.retry_ms
            while True:
                wake.clear()
                if self._resync_at is not None:
                    self._stop_replay()
                    yield resync_message(self._resync_at)
                    return
                if self._replay_task is not None:
                    if self._replay_error is not None:
                        yield _ERROR
                        return
                    chunk = self._take_replay()
                    if chunk:
                        yield chunk
                        continue
                if self._replay_task is None and self._cursor < hub._head:
                    if self._cursor < hub._head - hub.history:  # fell behind since the last flush
                        self._resync_at = hub._ids[-1]
                        continue
                    n = hub._head - self._cursor
                    chunk = hub._chunk_after(self._cursor)
                    self._cursor = hub._head
                    self.sent += n
                    yield chunk
                    continue
                if hub._ended:
                    if hub.error is not None:
                        yield _ERROR
                    return
                if keepalives != hub._keepalives:
                    keepalives = hub._keepalives
                    yield _KEEPALIVE
                    continue
                await wake.wait()
        finally:
            self._stop_replay()
            hub._leave(self)
            if self._on_close is not None:
                self._on_close(self)
