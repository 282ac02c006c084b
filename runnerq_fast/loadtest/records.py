"""The files a load-test run's processes write into its records directory, and reading them back.

Two kinds, both tab-separated text, one file per writing process (so no
process ever waits for another, and nothing interleaves):

``accepted-<pid>.tsv``, written by each load-generating process (locust's
HTTP users and the API agent), one line per activity an enqueue call
answered with success::

    <id> \\t <1 created | 0 an idempotency key returned an existing one> \\t <send time, epoch s> \\t <delay, s>

(a record of three fields, from an older run, has no delay: 0).

``runs-<pid>.tsv``, written by each worker process, one line per handler run::

    <id> \\t <attempt> \\t <type> \\t <ready, epoch s> \\t <start, epoch s> \\t <end, epoch s> \\t <outcome>

``outcome`` is ``ok`` or the exception's class name. ``ready`` is the send
time plus the delay, both from the payload (:mod:`runnerq_fast.loadtest.mix`);
start and end are the worker's clock (:func:`time.time`, microseconds) read
at the handler's entry and exit. Writes are buffered and flushed every 0.25 s
or 512 lines, and at process exit.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import msgspec

__all__ = ["Accepted", "LineWriter", "RecordTail", "Run", "parse_accepted", "parse_run", "read_accepted", "read_runs"]

_FLUSH_SECONDS = 0.25
_FLUSH_LINES = 512


class Run(msgspec.Struct, frozen=True, array_like=True):
    """One handler run, as a worker recorded it (times in epoch **seconds**)."""

    id: str
    attempt: int
    type: str
    ready: float
    start: float
    end: float
    outcome: str

    @property
    def ok(self) -> bool:
        """Whether the handler returned (the activity completes)."""
        return self.outcome == "ok"


class Accepted(msgspec.Struct, frozen=True, array_like=True):
    """One activity id a load generator got back from a successful enqueue (times in epoch **seconds**).

    ``delay`` is the activity's delay in seconds: it became ready at ``sent + delay``.
    """

    id: str
    created: bool
    sent: float
    delay: float = 0.0

    @property
    def ready(self) -> float:
        """When the activity became ready to run (epoch seconds)."""
        return self.sent + self.delay


class LineWriter:
    """Appends lines to ``<directory>/<prefix>-<pid>.tsv`` from any thread, buffered.

    Parameters
    ----------
    directory : str or Path
        The run's records directory (created if missing).
    prefix : str
        ``accepted`` or ``runs``.

    Notes
    -----
    The buffer is flushed every 0.25 s or 512 lines, on :meth:`close`, and
    at interpreter exit (``atexit`` and :mod:`multiprocessing`'s finalizers,
    which a spawned worker process runs instead of ``atexit``).
    """

    def __init__(self, directory: str | Path, prefix: str) -> None:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self.path = path / f"{prefix}-{os.getpid()}.tsv"
        self._fh: IO[str] | None = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._last = time.monotonic()
        atexit.register(self.close)
        from multiprocessing import util

        util.Finalize(self, self.close, exitpriority=10)

    def write(self, *fields: object) -> None:
        """Append one line of ``fields`` (tab-separated; floats with microseconds)."""
        line = "\t".join(f"{f:.6f}" if isinstance(f, float) else str(f) for f in fields) + "\n"
        with self._lock:
            self._pending.append(line)
            now = time.monotonic()
            if len(self._pending) >= _FLUSH_LINES or now - self._last >= _FLUSH_SECONDS:
                self._flush(now)

    def _flush(self, now: float) -> None:
        if self._fh is not None and self._pending:
            self._fh.write("".join(self._pending))
            self._fh.flush()
        self._pending.clear()
        self._last = now

    def flush(self) -> None:
        """Write out what is buffered."""
        with self._lock:
            self._flush(time.monotonic())

    def close(self) -> None:
        """Flush and close (idempotent)."""
        with self._lock:
            self._flush(time.monotonic())
            if self._fh is not None:
                self._fh.close()
                self._fh = None


def parse_run(f: list[str]) -> Run:
    """One ``runs-*.tsv`` line's fields as a :class:`Run`.

    Raises
    ------
    ValueError
        If there are not seven fields.
    """
    if len(f) != 7:
        raise ValueError(f"a run record has 7 fields, got {len(f)}: {f!r}")
    return Run(f[0], int(f[1]), f[2], float(f[3]), float(f[4]), float(f[5]), f[6])


def parse_accepted(f: list[str]) -> Accepted:
    """One ``accepted-*.tsv`` line's fields as an :class:`Accepted`.

    Raises
    ------
    ValueError
        If there are not three or four fields.
    """
    if len(f) not in (3, 4):
        raise ValueError(f"an accepted record has 3 or 4 fields, got {len(f)}: {f!r}")
    return Accepted(f[0], f[1] == "1", float(f[2]), float(f[3]) if len(f) == 4 else 0.0)


class RecordTail:
    """Reads what the processes appended to the records of ``directory`` since the last call (while they run).

    Each file's offset is kept; a line not yet ended (its writer is
    mid-flush) is left for the next call.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._offsets: dict[Path, int] = {}

    def _new_lines(self, prefix: str) -> Iterator[list[str]]:
        for path in sorted(self.directory.glob(f"{prefix}-*.tsv")):
            offset = self._offsets.get(path, 0)
            with path.open("rb") as fh:
                fh.seek(offset)
                data = fh.read()
            end = data.rfind(b"\n") + 1
            self._offsets[path] = offset + end
            for line in data[:end].decode("utf-8").splitlines():
                yield line.split("\t")

    def runs(self) -> list[Run]:
        """The handler runs recorded since the last call."""
        return [parse_run(f) for f in self._new_lines("runs")]

    def accepted(self) -> list[Accepted]:
        """The accepted enqueues recorded since the last call."""
        return [parse_accepted(f) for f in self._new_lines("accepted")]


def _lines(directory: Path, prefix: str) -> Iterator[list[str]]:
    for path in sorted(directory.glob(f"{prefix}-*.tsv")):
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if line.endswith("\n"):  # a line cut by a killed process is not a record
                    yield line.rstrip("\n").split("\t")


def read_runs(directory: str | Path) -> list[Run]:
    """Every handler run recorded in ``directory`` (all ``runs-*.tsv`` files).

    Raises
    ------
    ValueError
        If a complete line does not have the seven fields of a run.
    """
    return [parse_run(f) for f in _lines(Path(directory), "runs")]


def read_accepted(directory: str | Path) -> list[Accepted]:
    """Every accepted enqueue recorded in ``directory`` (all ``accepted-*.tsv`` files).

    Raises
    ------
    ValueError
        If a complete line does not have the three or four fields of an accepted enqueue.
    """
    return [parse_accepted(f) for f in _lines(Path(directory), "accepted")]
