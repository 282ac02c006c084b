"""``runnerq_fast._lifeline``: a process watching its supervisor, with real processes.

Each test starts a stand-in supervisor (a Python process) that starts a child
running a few lines of this package, kills the stand-in with SIGKILL, and
measures how long the child outlives it. The child's stdout is the stand-in's,
which is this test's pipe.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import IO

import pytest

from runnerq_fast._lifeline import ENV_VAR

DEADLINE = 0.5
"""Seconds within which a child must be gone after its supervisor's death."""

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and signals")

PARENT = textwrap.dedent("""
    import os, subprocess, sys, time
    r, w = os.pipe()  # the child's sentinel: this process alone holds the write end
    env = dict(os.environ, **({"RUNNERQ_SUPERVISOR_PID": str(os.getpid())} if sys.argv[2] == "env" else {}))
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(r), str(os.getpid())], pass_fds=(r,), env=env)
    os.close(r)
    print(child.pid, flush=True)
    time.sleep(60)
""")


class Family:
    """A stand-in supervisor and its child running ``code`` (argv: the sentinel's fd, the supervisor's pid)."""

    def __init__(self, code: str, *, env_var: bool = False) -> None:
        self.parent = subprocess.Popen(
            [sys.executable, "-c", PARENT, textwrap.dedent(code), "env" if env_var else "-"],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        out: IO[str] | None = self.parent.stdout
        assert out is not None
        self.out = out
        self.child = int(self.line())

    def line(self) -> str:
        text = self.out.readline().strip()
        assert text, f"the stand-in supervisor ended ({self.parent.poll()})"
        return text

    def kill_parent(self) -> float:
        """SIGKILL the stand-in; seconds until the child was gone (at most 10 s of waiting)."""
        began = time.monotonic()
        self.parent.send_signal(signal.SIGKILL)
        while _alive(self.child) and time.monotonic() - began < 10:
            time.sleep(0.002)
        return time.monotonic() - began

    def close(self) -> None:
        if self.parent.poll() is None:
            self.parent.kill()
        self.parent.wait(10)
        self.out.close()
        if _alive(self.child):
            os.kill(self.child, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"  # a zombie nobody reaped yet is gone
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


@pytest.fixture
def families() -> Iterator[list[Family]]:
    made: list[Family] = []
    yield made
    for f in made:
        f.close()


def test_the_sentinel_alone_ends_a_child_whose_engine_has_not_started(families: list[Family]) -> None:
    # no kernel signal, no getppid(): the portable watch (as under forkserver, or where prctl is missing)
    f = Family("""
        import os, sys, time
        from runnerq_fast._lifeline import Lifeline
        lifeline = Lifeline(int(sys.argv[2]), parent_is_supervisor=False)
        lifeline.use_sentinel(int(sys.argv[1]))
        print("kernel", lifeline.kernel_armed, flush=True)
        time.sleep(60)
    """)
    families.append(f)
    assert f.line() == "kernel False"
    gone_after = f.kill_parent()
    assert gone_after <= DEADLINE, gone_after


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_the_package_import_arms_the_watch_from_the_environment_and_unsets_it(families: list[Family]) -> None:
    f = Family(f"""
        import os, time
        import runnerq_fast
        from runnerq_fast import _lifeline
        lifeline = _lifeline.current()
        print(lifeline is not None and lifeline.kernel_armed, os.environ.get({ENV_VAR!r}), flush=True)
        time.sleep(60)
    """, env_var=True)
    families.append(f)
    assert f.line() == "True None"  # watching, and no grandchild inherits the variable
    gone_after = f.kill_parent()
    assert gone_after <= DEADLINE, gone_after


def test_a_running_child_is_told_then_ended_after_exit_after(families: list[Family]) -> None:
    exit_after = 0.3
    f = Family(f"""
        import sys, time
        from runnerq_fast._lifeline import Lifeline
        lifeline = Lifeline(int(sys.argv[2]), parent_is_supervisor=True)
        lifeline.use_sentinel(int(sys.argv[1]))
        lifeline.on_death(lambda: print("told", flush=True), exit_after={exit_after})
        print("kernel", lifeline.kernel_armed, flush=True)
        time.sleep(60)  # a stop that never ends
    """)
    families.append(f)
    assert f.line() == "kernel False"  # disarmed by on_death(): the child must be able to stop cleanly
    gone_after = f.kill_parent()
    assert exit_after <= gone_after <= DEADLINE, gone_after
    assert f.out.readline().strip() == "told"


def test_a_child_whose_supervisor_died_before_the_watch_began_ends_at_once(families: list[Family]) -> None:
    f = Family("""
        import os, sys, time
        time.sleep(0.5)  # the stand-in is killed meanwhile
        from runnerq_fast._lifeline import Lifeline
        Lifeline(int(sys.argv[2]), parent_is_supervisor=True)
        print("not reached", flush=True)
    """)
    families.append(f)
    f.parent.send_signal(signal.SIGKILL)
    f.parent.wait(10)
    deadline = time.monotonic() + 10
    while _alive(f.child) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(f.child)
    assert f.out.read() == ""
