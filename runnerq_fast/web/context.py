"""What one app instance owns: its backend, queues, buffers, settings (no module-level state).

:func:`~runnerq_fast.web.create_app` builds one :class:`WebContext`; every
route is a method of an object holding it, so two apps in one process (two
mounts, two backends) never share anything.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from starlette.requests import Request

from runnerq_fast.config import WorkerConfig
from runnerq_fast.errors import InvalidActivityError, RunnerQError
from runnerq_fast.executor import ActivityExecutor, validate_queue_name
from runnerq_fast.storage import Backend, open_backend
from runnerq_fast.web.auth import check_token, check_write, require_write
from runnerq_fast.web.buffer import EnqueueBuffer
from runnerq_fast.web.responses import ProblemError

__all__ = ["WebContext", "WebLimits"]

log = logging.getLogger("runnerq_fast.web")


class WebLimits:
    """Size limits of one app.

    Parameters
    ----------
    max_body_bytes : int
        Largest single-activity request body, bytes. Default 2 MiB (the 1 MiB
        payload limit plus room for the rest).
    max_batch_body_bytes : int
        Largest batch request body, bytes. Default 64 MiB.
    max_batch : int
        Most activities in one batch request. Default 10,000.
    max_wait : float
        Longest ``?wait=`` long-poll, seconds. Default 60.
    """

    __slots__ = ("max_batch", "max_batch_body_bytes", "max_body_bytes", "max_wait")

    def __init__(
        self,
        max_body_bytes: int = 2 * 1024 * 1024,
        max_batch_body_bytes: int = 64 * 1024 * 1024,
        max_batch: int = 10_000,
        max_wait: float = 60.0,
    ) -> None:
        if max_body_bytes < 1 or max_batch_body_bytes < 1 or max_batch < 1 or not max_wait > 0:
            raise ValueError("body limits, max_batch and max_wait must be positive")
        self.max_body_bytes = max_body_bytes
        self.max_batch_body_bytes = max_batch_body_bytes
        self.max_batch = max_batch
        self.max_wait = max_wait


class WebContext:
    """The state of one app.

    Parameters
    ----------
    backend_or_url : Backend or str
        An opened backend (the caller closes it) or a URL the app opens at
        startup (or at its first request when its lifespan does not run, as in
        a mount) and closes at shutdown.
    queues : sequence of str or None
        The queues served; ``None`` serves any queue.
    token : str or None
        Bearer token required by mutating routes.
    read_only : bool
        Serve GETs only.
    config : WorkerConfig
        Enqueue defaults (retries, timeout, payload limit, idempotency TTL).
    limits : WebLimits
        Body and batch limits.
    enqueue_batch : int
        Most activities one coalesced backend call stores.
    """

    def __init__(
        self,
        backend_or_url: Backend | str,
        *,
        queues: Sequence[str] | None,
        token: str | None,
        read_only: bool,
        config: WorkerConfig,
        limits: WebLimits,
        enqueue_batch: int = 1000,
    ) -> None:
        if isinstance(backend_or_url, Backend):
            self._backend: Backend | None = backend_or_url
            self.url: str | None = None
        elif isinstance(backend_or_url, str) and backend_or_url:
            self._backend = None
            self.url = backend_or_url
        else:
            raise TypeError(f"create_app needs a Backend or a backend URL, got {backend_or_url!r}")
        if queues is not None:
            if isinstance(queues, str):
                queues = [queues]
            queues = [validate_queue_name(q) for q in queues]
            if not queues:
                raise ValueError("queues must name at least one queue (or be None for any queue)")
        self.queues: tuple[str, ...] | None = None if queues is None else tuple(dict.fromkeys(queues))
        self.token: bytes | None = None if token is None else check_token(token)
        self.read_only = read_only
        self.config = config
        self.limits = limits
        self.enqueue_batch = enqueue_batch
        self._executors: dict[str, ActivityExecutor] = {}
        self._buffers: dict[str, EnqueueBuffer] = {}
        self._open_lock = asyncio.Lock()
        self._owns_backend = self._backend is None
        self._closing = False
        #: Set when the server begins to shut down: streams end, long-polls answer at once.
        self.shutting_down = asyncio.Event()

    # ------------------------------------------------------------- lifecycle
    @property
    def default_queue(self) -> str:
        """The app's only queue, else ``default``."""
        if self.queues is not None and len(self.queues) == 1:
            return self.queues[0]
        return "default"

    async def open(self) -> Backend:
        """The backend, opening it from the URL on first use."""
        if self._backend is not None:
            return self._backend
        async with self._open_lock:
            if self._backend is None:
                assert self.url is not None
                self._backend = await open_backend(self.url)
        return self._backend

    def begin_shutdown(self) -> None:
        """End the open event streams and long-polls (the server is about to stop)."""
        self.shutting_down.set()

    async def close(self) -> None:
        """Flush the enqueue buffers; close the backend if the app opened it."""
        self._closing = True
        self.shutting_down.set()
        for buf in list(self._buffers.values()):
            await buf.close()
        self._buffers.clear()
        if self._owns_backend and self._backend is not None:
            backend, self._backend = self._backend, None
            await backend.close()

    async def backend(self) -> Backend:
        """The open backend for a request.

        Raises
        ------
        ProblemError
            503 when the backend cannot be opened or the app is shutting down.
        """
        if self._backend is not None:
            return self._backend
        if self._closing:
            raise ProblemError(503, "the service is shutting down", headers={"Retry-After": "1"})
        try:
            return await self.open()
        except Exception as exc:
            log.warning("cannot open the backend: %s: %s", type(exc).__name__, exc)
            raise ProblemError(503, f"the backend cannot be opened: {type(exc).__name__}: {exc}") from None

    # ---------------------------------------------------------------- queues
    def queue(self, name: str | None) -> str:
        """Validate a queue named by a path or ``?queue=`` (``None``: the default queue).

        Raises
        ------
        ProblemError
            422 for an invalid name, 404 for a queue this app does not serve.
        """
        if name is None or name == "":
            return self.default_queue
        try:
            validate_queue_name(name)
        except InvalidActivityError as exc:
            raise ProblemError(422, str(exc)) from None
        if self.queues is not None and name not in self.queues:
            raise ProblemError(404, f"queue {name!r} is not served here; served: {', '.join(self.queues)}")
        return name

    async def executor(self, queue: str) -> ActivityExecutor:
        """An executor for ``queue`` (validation and defaults of the Python API), with the per-type
        defaults the workers registered read (at most every ``TYPE_DEFAULTS_TTL`` seconds).

        Raises
        ------
        ProblemError
            503 when the store cannot be read.
        """
        ex = self._executors.get(queue)
        if ex is None:
            ex = self._executors[queue] = ActivityExecutor(await self.backend(), queue, self.config)
        if ex._defaults_stale():
            try:
                await ex.type_defaults()
            except RunnerQError as exc:
                raise ProblemError(503, f"the backend failed: {type(exc).__name__}: {exc}") from None
        return ex

    async def buffer(self, queue: str) -> EnqueueBuffer:
        """The coalescing enqueue buffer of ``queue``."""
        buf = self._buffers.get(queue)
        if buf is None:
            if self._closing:
                raise ProblemError(503, "the service is shutting down", headers={"Retry-After": "1"})
            buf = self._buffers[queue] = EnqueueBuffer(await self.backend(), queue, max_batch=self.enqueue_batch)
        return buf

    def require_write(self, request: Request) -> None:
        """Refuse a write on a read-only app or without the bearer token (see :mod:`.auth`)."""
        require_write(request, self.token, self.read_only)

    def check_write(self, authorization: str | None) -> None:
        """:meth:`require_write` given the ``Authorization`` header's value."""
        check_write(authorization, self.token, self.read_only)
