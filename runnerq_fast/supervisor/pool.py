"""The supervisor's loop: start N worker processes, watch them, restart, recycle, stop.

The supervisor has no event loop. It sleeps in
``multiprocessing.connection.wait`` on the children's sentinels and on a pipe
that signal handlers write to (``signal.set_wakeup_fd``), so a child's exit
or a signal wakes it at once; it also wakes every ``tick`` seconds to check
for due restarts and for recycling.

* **Signals**: the first SIGTERM or SIGINT is forwarded once, as SIGTERM, to
  every child (a graceful stop each); a second one sends SIGKILL to every
  child that still runs.
* **Exit of a child**: while stopping, expected. Otherwise exit code 0 (the
  child stopped without being asked) means a new child after ``backoff``;
  exit code 2 before its engine started means bad input (configuration,
  handlers) — no restart, the supervisor stops and exits 2; anything else is
  a crash, restarted per :class:`RestartPolicy` until a crash loop, when the
  supervisor stops the other children and exits 1.
* **Death of the supervisor**: every child watches it from its first import
  of the package on (:mod:`runnerq_fast._lifeline`; the supervisor names
  itself in ``RUNNERQ_SUPERVISOR_PID`` for the spawn of each child) and is
  gone within 0.5 s (:mod:`~runnerq_fast.supervisor.child`).
* **Recycling**: a child past ``max_activities`` finished activities or
  ``max_memory`` bytes of resident memory gets a replacement first; once the
  replacement's engine has started, the old child gets SIGTERM.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Generic, TypeVar

import msgspec

from runnerq_fast._lifeline import ENV_VAR
from runnerq_fast.errors import ConfigError
from runnerq_fast.supervisor.child import ChildLink, bootstrap, rss_bytes
from runnerq_fast.supervisor.metrics import MetricsDirectory
from runnerq_fast.supervisor.policy import RestartPolicy

__all__ = ["Supervisor", "SupervisorConfig", "SupervisorResult", "describe_exit"]

log = logging.getLogger("runnerq_fast.supervisor")

A = TypeVar("A")

START_METHODS = ("spawn", "forkserver")


class SupervisorConfig(msgspec.Struct, kw_only=True, frozen=True):
    """How the supervisor runs its children (the CLI's options, with their defaults).

    Attributes
    ----------
    processes : int
        Worker processes kept running (at least 1).
    max_activities : int or None
        Recycle a child once it finished at least this many activities
        (completed, retried, failed or dead-lettered); ``None``: never.
    max_memory : int or None
        Recycle a child whose resident set size reaches this many bytes
        (read from ``/proc`` once a second; Linux); ``None``: never.
    restart_backoff, restart_backoff_max : float
        First and longest delay before restarting a crashed child, seconds (0.5, 30).
    restart_limit : int
        Crashes of one slot within ``restart_window`` that make a crash loop (5).
    restart_window : float
        Seconds (60).
    start_method : str
        ``"spawn"`` (default) or ``"forkserver"``; never ``"fork"``.
    metrics_port : int or None
        Serve the children's aggregated Prometheus metrics on this port (0: any free port).
    metrics_host : str
        Address the metrics endpoint binds (default ``127.0.0.1``).
    tick : float
        Longest sleep of the supervisor's loop, seconds (0.25).
    """

    processes: int = 1
    max_activities: int | None = None
    max_memory: int | None = None
    restart_backoff: float = 0.5
    restart_backoff_max: float = 30.0
    restart_limit: int = 5
    restart_window: float = 60.0
    start_method: str = "spawn"
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    tick: float = 0.25


class SupervisorResult(msgspec.Struct, frozen=True):
    """How the supervisor ended.

    Attributes
    ----------
    exit_code : int
        0 graceful stop; 1 crash loop, a child failing to stop, or a forced stop; 2 bad input.
    reason : str
        One line saying why (empty after a graceful stop).
    """

    exit_code: int
    reason: str = ""


@dataclass(eq=False)
class _Child:
    slot: int
    process: Any  # multiprocessing.process.BaseProcess
    link: ChildLink
    started: float
    pid: int = 0
    ready: bool = False
    retiring: str = ""  # why it is being replaced ("" while it serves)
    term_sent: bool = False


@dataclass
class _State:
    children: list[_Child] = field(default_factory=list)
    current: dict[int, _Child | None] = field(default_factory=dict)
    restart_at: dict[int, float] = field(default_factory=dict)
    stopping: bool = False
    forced: bool = False
    result: SupervisorResult | None = None
    stop_failures: list[str] = field(default_factory=list)


def describe_exit(exitcode: int) -> str:
    """``"exit code 1"``, or ``"killed by SIGKILL"`` for a negative (signal) exit code."""
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


class Supervisor(Generic[A]):
    """Keeps ``config.processes`` children running ``target(args, link)``.

    Parameters
    ----------
    target : callable
        A module-level function (``spawn`` sends it by name) run in every
        child with ``args`` and the child's :class:`ChildLink`; it should
        serve an engine with :func:`~runnerq_fast.supervisor.child.serve_child`.
        Exit codes: 0 after a graceful stop, 2 for bad input, anything else a failure.
    args : A
        Picklable arguments for ``target``.
    config : SupervisorConfig
        Options.

    Raises
    ------
    ConfigError
        If an option is out of range.
    """

    def __init__(self, target: Callable[[A, ChildLink], None], args: A, config: SupervisorConfig) -> None:
        if config.processes < 1:
            raise ConfigError(f"processes must be at least 1, got {config.processes}")
        if config.start_method not in START_METHODS:
            raise ConfigError(f"start method must be one of {', '.join(START_METHODS)}, got {config.start_method!r}")
        if config.max_activities is not None and config.max_activities < 1:
            raise ConfigError(f"max activities per child must be at least 1, got {config.max_activities}")
        if config.max_memory is not None and config.max_memory < 1:
            raise ConfigError(f"max memory per child must be positive, got {config.max_memory}")
        self.policy = RestartPolicy(backoff=config.restart_backoff, backoff_max=config.restart_backoff_max,
                                    limit=config.restart_limit, window=config.restart_window)
        self.config = config
        self._target = target
        self._args = args
        self._ctx: Any = multiprocessing.get_context(config.start_method)
        self._state = _State()
        self._signals: list[int] = []
        self._signals_seen = 0
        self._memory_checked = 0.0
        self.metrics: MetricsDirectory | None = None
        self.metrics_port: int | None = None

    # ------------------------------------------------------------------ run
    def run(self) -> SupervisorResult:
        """Start the children and supervise them until a stop; blocks (main thread only).

        Returns
        -------
        SupervisorResult
            The exit code and the reason.
        """
        st = self._state
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        old_wakeup = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        try:
            self.metrics = MetricsDirectory()
            if self.config.metrics_port is not None:
                self.metrics_port = self.metrics.serve(self.config.metrics_port, self.config.metrics_host)
                log.info("supervisor %d: metrics of all worker processes at http://%s:%d/metrics", os.getpid(),
                         self.config.metrics_host, self.metrics_port)
            log.info("supervisor %d: starting %d worker processes (%s)", os.getpid(), self.config.processes,
                     self.config.start_method)
            for slot in range(self.config.processes):
                st.current[slot] = None
                self._spawn(slot)
            self._loop(wake_r)
        finally:
            for c in st.children:  # only after an error in this loop
                if c.process.is_alive():
                    c.process.kill()
                c.process.join(5)
            signal.set_wakeup_fd(old_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(wake_r)
            os.close(wake_w)
            if self.metrics is not None:
                self.metrics.close()
        if st.result is not None:
            return st.result
        if st.stop_failures:
            return SupervisorResult(1, "; ".join(st.stop_failures))
        log.info("supervisor %d: every worker process stopped", os.getpid())
        return SupervisorResult(0)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signum)

    def _loop(self, wake_r: int) -> None:
        st = self._state
        while True:
            self._handle_signals()
            self._reap()
            if st.stopping and not st.children:
                return
            now = time.monotonic()
            if not st.stopping:
                self._restart_due(now)
                self._check_recycling(now)
                self._retire_replaced()
            timeout = self.config.tick
            if st.restart_at and not st.stopping:
                timeout = max(0.0, min(timeout, min(st.restart_at.values()) - now))
            handles: list[Any] = [c.process.sentinel for c in st.children]
            multiprocessing.connection.wait([*handles, wake_r], timeout)
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass

    # -------------------------------------------------------------- children
    def _spawn(self, slot: int) -> None:
        st = self._state
        link = ChildLink(self._ctx)
        process = self._ctx.Process(target=bootstrap, args=(self._target, self._args, link),
                                    name=f"runnerq-worker-{slot}")
        if self.config.start_method == "spawn" and threading.current_thread() is threading.main_thread():
            # the child watches this process from its first import of runnerq_fast on (runnerq_fast._lifeline);
            # its parent-death signal follows the forking thread, hence the main thread only
            os.environ[ENV_VAR] = str(os.getpid())
            try:
                process.start()
            finally:
                del os.environ[ENV_VAR]
        else:
            process.start()
        child = _Child(slot, process, link, time.monotonic(), pid=process.pid or 0)
        st.children.append(child)
        st.current[slot] = child
        log.info("supervisor: worker process %d started (pid %d)", slot, child.pid)

    def _reap(self) -> None:
        for c in list(self._state.children):
            if not c.ready and c.link.ready:
                c.ready = True
            code = c.process.exitcode
            if code is not None:
                self._on_exit(c, code)

    def _on_exit(self, c: _Child, code: int) -> None:
        st = self._state
        st.children.remove(c)
        c.ready = c.ready or c.link.ready
        c.process.join()
        c.process.close()
        if self.metrics is not None:
            self.metrics.process_dead(c.pid)
        what = describe_exit(code)
        name = f"worker process {c.slot} (pid {c.pid})"
        if st.current.get(c.slot) is c:
            st.current[c.slot] = None
        if st.stopping:
            if code not in (0, -signal.SIGTERM) and not st.forced:
                st.stop_failures.append(f"{name} ended with {what} while stopping")
                log.error("supervisor: %s ended with %s while stopping", name, what)
            else:
                log.info("supervisor: %s stopped (%s)", name, what)
            return
        if c.retiring:
            level = logging.INFO if code == 0 else logging.WARNING
            log.log(level, "supervisor: %s recycled after %s (%s)", name, c.retiring, what)
            return
        now = time.monotonic()
        if code == 0:
            log.warning("supervisor: %s stopped without being asked to; starting a new one in %.1f s", name,
                        self.policy.backoff)
            st.restart_at[c.slot] = now + self.policy.backoff
            return
        if code == 2 and not c.ready:
            self._give_up(SupervisorResult(2, f"{name} exited with code 2 (bad input) before its engine started; "
                                              "not restarting"))
            return
        delay = self.policy.crashed(c.slot, now)
        if delay is None:
            self._give_up(SupervisorResult(
                1, f"{name} crashed {self.policy.limit} times within {self.policy.window:g} s "
                   f"(last: {what}); giving up"))
            return
        log.warning("supervisor: %s crashed (%s); restarting in %.1f s", name, what, delay)
        st.restart_at[c.slot] = now + delay

    def _give_up(self, result: SupervisorResult) -> None:
        st = self._state
        if st.result is None:
            st.result = result
        log.error("supervisor: %s", result.reason)
        self._begin_stop()

    def _begin_stop(self) -> None:
        st = self._state
        st.stopping = True
        st.restart_at.clear()
        for c in st.children:
            self._terminate(c)

    def _terminate(self, c: _Child) -> None:
        if not c.term_sent:
            c.term_sent = True
            self._send(c, signal.SIGTERM)

    @staticmethod
    def _send(c: _Child, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(c.pid, sig)

    def _handle_signals(self) -> None:
        st = self._state
        while self._signals_seen < len(self._signals):
            sig = signal.Signals(self._signals[self._signals_seen])
            self._signals_seen += 1
            if self._signals_seen == 1:
                log.info("supervisor %d: received %s; stopping %d worker processes gracefully", os.getpid(),
                         sig.name, len(st.children))
                if not st.stopping:
                    self._begin_stop()
                continue
            if not st.forced:
                st.forced = True
                running = [c for c in st.children if c.process.exitcode is None]
                log.warning("supervisor %d: received %s again; killing %d worker processes", os.getpid(),
                            sig.name, len(running))
                for c in running:
                    self._send(c, signal.SIGKILL)
                if st.result is None:
                    st.result = SupervisorResult(
                        1, f"stopped at once by a second {sig.name}: {len(running)} worker processes killed "
                           "(what they were running returns to the queue when its lease expires)")

    def _restart_due(self, now: float) -> None:
        st = self._state
        for slot, at in list(st.restart_at.items()):
            if at <= now:
                del st.restart_at[slot]
                self._spawn(slot)

    def _check_recycling(self, now: float) -> None:
        cfg = self.config
        if cfg.max_activities is None and cfg.max_memory is None:
            return
        check_memory = cfg.max_memory is not None and now - self._memory_checked >= 1.0
        if check_memory:
            self._memory_checked = now
        st = self._state
        for c in list(st.children):
            if c.retiring or not c.ready or st.current.get(c.slot) is not c:
                continue
            reason = ""
            done = c.link.activities
            if cfg.max_activities is not None and done >= cfg.max_activities:
                reason = f"{done} activities"
            elif check_memory and cfg.max_memory is not None:
                rss = rss_bytes(c.pid)
                if rss is not None and rss >= cfg.max_memory:
                    reason = f"reaching {rss / 2**20:.0f} MiB resident"
            if reason:
                log.info("supervisor: recycling worker process %d (pid %d) after %s; its replacement starts first",
                         c.slot, c.pid, reason)
                c.retiring = reason
                st.current[c.slot] = None
                self._spawn(c.slot)

    def _retire_replaced(self) -> None:
        st = self._state
        for c in st.children:
            if c.retiring and not c.term_sent:
                new = st.current.get(c.slot)
                if new is not None and (new.ready or new.link.ready):
                    self._terminate(c)
