"""A supervised worker process's watch on its supervisor, from the first moment it runs Python of this package.

Standard library only, and nothing of the package: ``runnerq_fast/__init__``
imports this module before anything else, and the import runs
:func:`watch_from_environment`, so a child the supervisor spawned watches
its parent while it is still importing the package (about half a second),
then while it imports the app, connects, migrates and starts its engine, and
while it runs.

Two watches, whichever fires first:

* **Linux**: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, so the kernel kills the
  child the moment its parent dies, even while Python cannot run (a blocking
  import in C, a hung connect). The signal follows the death of the parent
  *thread* that forked the child: the supervisor only spawns from its main
  thread, whose end is the end of the process. The child sets it first and
  checks ``getppid()`` right after (a parent that died before the call sends
  nothing). It is armed only until the engine has started: from then on
  (:meth:`Lifeline.on_death`) the child stops cleanly instead.
* **Everywhere**: a daemon thread. Until the child knows its parent's
  sentinel it polls ``getppid()`` every :data:`POLL_INTERVAL` seconds; once
  :meth:`Lifeline.use_sentinel` gave it the read end of a pipe whose only
  writer is the supervisor (``multiprocessing.parent_process().sentinel``),
  it blocks on it: end of file means the supervisor died (with the
  ``forkserver`` start method too, whose children are the fork server's).

On the supervisor's death a child whose engine has not started exits at once
(:data:`ORPHAN_EXIT_CODE`): it has claimed nothing. Once :meth:`Lifeline.on_death`
gave it a callback, the watch calls it (it asks the engine to stop, from
another thread) and ends the process ``exit_after`` seconds later if it still
runs. The thread needs the GIL: C code that holds it (rare: most blocking
calls release it) delays the notice until it returns.
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import NoReturn

__all__ = ["ENV_VAR", "ORPHAN_EXIT_CODE", "POLL_INTERVAL", "Lifeline", "current", "watch", "watch_from_environment"]

ENV_VAR = "RUNNERQ_SUPERVISOR_PID"
"""Set by the supervisor, for the spawn of one child only, to its own pid; the child removes it at once."""

POLL_INTERVAL = 0.02
"""Seconds between two ``getppid()`` checks while the parent's sentinel is not known yet."""

ORPHAN_EXIT_CODE = 70
"""Exit code of a child that ended itself because its supervisor died (nobody reads it: its parent is gone)."""

_PR_SET_PDEATHSIG = 1


def _set_parent_death_signal(sig: int) -> bool:
    """``prctl(PR_SET_PDEATHSIG, sig)`` (0 clears it); ``False`` where there is no such call (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


class Lifeline:
    """The watch of one child on its supervisor (one per process: see :func:`watch`).

    Parameters
    ----------
    supervisor_pid : int
        The supervisor's process id.
    parent_is_supervisor : bool
        Whether the supervisor is this process's parent (``spawn``): then the
        kernel's parent-death signal is armed and ``getppid()`` is checked.
        ``False`` with ``forkserver`` (the parent is the fork server, which
        outlives the supervisor while children hold its pipe): then only the
        sentinel tells.
    """

    def __init__(self, supervisor_pid: int, *, parent_is_supervisor: bool) -> None:
        self.supervisor_pid = supervisor_pid
        self._parent_is_supervisor = parent_is_supervisor
        self._sentinel: int | None = None
        self._callback: Callable[[], object] | None = None
        self._exit_after = 0.0
        self._noticed = False
        if self._gone():
            os._exit(ORPHAN_EXIT_CODE)  # already gone (checked before ctypes is imported: it takes milliseconds)
        self._death_signal = parent_is_supervisor and _set_parent_death_signal(signal.SIGKILL)
        if self._gone():
            os._exit(ORPHAN_EXIT_CODE)  # died before the signal was armed: nothing will send it
        self._thread = threading.Thread(target=self._watch, name="runnerq-supervisor-lifeline", daemon=True)
        self._thread.start()

    @property
    def kernel_armed(self) -> bool:
        """Whether the kernel kills this process when its parent dies (Linux, until :meth:`on_death`)."""
        return self._death_signal

    def use_sentinel(self, fd: int) -> None:
        """Watch ``fd`` (readable at end of file: the supervisor died) instead of polling ``getppid()``."""
        self._sentinel = fd

    def on_death(self, callback: Callable[[], object], *, exit_after: float) -> None:
        """From now on, on the supervisor's death call ``callback()`` and end the process ``exit_after`` s later.

        Disarms the kernel's parent-death SIGKILL first, so the callback can
        stop the engine cleanly. ``callback`` runs on the watching thread: it
        must hand its work to the event loop (``loop.call_soon_threadsafe``).

        Parameters
        ----------
        callback : callable
            Called once, with no argument; what it raises is ignored.
        exit_after : float
            Seconds after the death was noticed at which the process ends
            with ``os._exit(ORPHAN_EXIT_CODE)`` if it still runs.
        """
        self._exit_after = exit_after
        self._callback = callback
        if self._death_signal:
            _set_parent_death_signal(0)
            self._death_signal = False

    @property
    def orphaned(self) -> bool:
        """Whether the supervisor's death was noticed."""
        return self._noticed

    def exit_now(self) -> NoReturn:
        """End the process at once, standard streams flushed (after the stop an orphan does once it noticed).

        An orphan does not go through the interpreter's shutdown: module
        teardown alone can take longer than what is left of its deadline,
        and the watching thread cannot end the process once that began.
        """
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                if stream is not None:
                    stream.flush()
        os._exit(ORPHAN_EXIT_CODE)

    def _gone(self) -> bool:
        return self._parent_is_supervisor and os.getppid() != self.supervisor_pid

    def _watch(self) -> None:
        while True:
            fd = self._sentinel
            if fd is not None:
                try:
                    with selectors.DefaultSelector() as sel:
                        sel.register(fd, selectors.EVENT_READ)
                        while not sel.select():
                            pass
                except (OSError, ValueError):  # a closed or bad fd: fall back to polling
                    self._sentinel = None
                    continue
                break
            time.sleep(POLL_INTERVAL)
            if self._gone():
                break
        self._died()

    def _died(self) -> None:
        callback = self._callback
        if callback is None:
            os._exit(ORPHAN_EXIT_CODE)  # the engine has not started: nothing claimed, nothing to hand back
        self._noticed = True
        noticed = time.monotonic()
        with contextlib.suppress(BaseException):
            callback()
        time.sleep(max(0.0, self._exit_after - (time.monotonic() - noticed)))
        _tell(f"runnerq-fast worker process {os.getpid()}: still running {self._exit_after:g} s after its "
              f"supervisor {self.supervisor_pid} died; exiting now (what it had not handed back returns to the "
              "queue when its lease expires)\n")
        os._exit(ORPHAN_EXIT_CODE)


def _tell(text: str) -> None:
    """Write ``text`` to stderr if that cannot block (a full pipe must not delay the exit); best effort."""
    with contextlib.suppress(OSError, ValueError):
        _, writable, _ = select.select([], [2], [], 0)
        if writable:
            os.write(2, text.encode())


_current: Lifeline | None = None
_lock = threading.Lock()


def current() -> Lifeline | None:
    """This process's lifeline, or ``None`` if it is not a supervised child."""
    return _current


def watch(supervisor_pid: int, *, parent_is_supervisor: bool) -> Lifeline:
    """Start watching ``supervisor_pid`` (once per process: later calls return the first lifeline).

    If the supervisor is already gone, the process ends inside this call
    (``os._exit(ORPHAN_EXIT_CODE)``): nothing has been claimed yet.
    """
    global _current
    with _lock:
        if _current is None:
            _current = Lifeline(supervisor_pid, parent_is_supervisor=parent_is_supervisor)
        return _current


def watch_from_environment() -> None:
    """Watch the supervisor named by :data:`ENV_VAR`, if set, and unset it (so no grandchild inherits it)."""
    value = os.environ.pop(ENV_VAR, None)
    if value is None:
        return
    try:
        pid = int(value)
    except ValueError:
        return
    watch(pid, parent_is_supervisor=True)


watch_from_environment()  # at import: ``runnerq_fast/__init__`` imports this module before anything else
