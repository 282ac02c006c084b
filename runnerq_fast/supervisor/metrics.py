"""The multiprocess metrics directory of a supervised worker, and its ``/metrics`` endpoint.

prometheus-client's multiprocess mode makes every process write its metric
values to memory-mapped ``*.db`` files in the directory named by
``PROMETHEUS_MULTIPROC_DIR``; a ``MultiProcessCollector`` sums them at scrape
time. The supervisor owns that directory:

* at start it uses ``$PROMETHEUS_MULTIPROC_DIR`` if set (and wipes the
  ``*.db`` files a previous run left there), else a fresh temporary directory
  it removes at exit; children inherit the variable;
* when a child exits it calls ``mark_process_dead`` (drops the child's
  ``live*`` gauges) and folds the child's other files into one ``*_archive.db``
  file per metric type and gauge mode, so the totals keep what a dead child
  counted while the number of files stays bounded however often children are
  recycled or restarted (files of dead processes otherwise pile up and slow
  every scrape);
* with a port, it serves the aggregate at ``http://HOST:PORT/metrics``.

Gauges in mode ``all`` (one series per process) are kept as they are.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, mmap_dict, multiprocess, start_http_server
from prometheus_client.registry import Collector

__all__ = ["ENV", "MetricsDirectory"]

log = logging.getLogger("runnerq_fast.supervisor")

# prometheus-client's multiprocess helpers carry no annotations
MmapedDict: Any = mmap_dict.MmapedDict
MultiProcessCollector: Any = multiprocess.MultiProcessCollector
mark_process_dead: Any = multiprocess.mark_process_dead

ENV = "PROMETHEUS_MULTIPROC_DIR"
"""The environment variable prometheus-client's multiprocess mode reads."""

# how a dead process's value folds into the archive, by file prefix (type, or gauge_<mode>)
_ADD = ("counter", "histogram", "summary", "gauge_sum")
_MAX, _MIN, _LATEST = "gauge_max", "gauge_min", "gauge_mostrecent"


class _LockedCollector(Collector):
    """A ``MultiProcessCollector`` that never reads while the supervisor folds files."""

    def __init__(self, path: str, lock: threading.Lock) -> None:
        self._inner = MultiProcessCollector(None, path=path)
        self._lock = lock

    def collect(self) -> Iterable[Any]:
        with self._lock:
            return list(self._inner.collect())


class MetricsDirectory:
    """The directory the children's metrics go to.

    Parameters
    ----------
    path : str, optional
        The directory; default ``$PROMETHEUS_MULTIPROC_DIR``, else a new
        temporary one (removed by :meth:`close`). An existing directory is
        kept, its ``*.db`` files deleted.
    """

    def __init__(self, path: str | None = None) -> None:
        path = path or os.environ.get(ENV) or None
        self.owned = path is None
        self.path = tempfile.mkdtemp(prefix="runnerq-metrics-") if path is None else os.path.abspath(path)
        os.makedirs(self.path, exist_ok=True)
        stale = self._files()
        for f in stale:
            os.remove(f)
        if stale:
            log.info("removed %d metric files a previous run left in %s", len(stale), self.path)
        os.environ[ENV] = self.path
        self._lock = threading.Lock()
        self._server: Any = None

    def _files(self) -> list[str]:
        return glob.glob(os.path.join(self.path, "*.db"))

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve the children's aggregated metrics at ``http://host:port/metrics`` from a thread.

        Returns
        -------
        int
            The port bound (useful with ``port=0``).

        Raises
        ------
        OSError
            If the address cannot be bound.
        """
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_LockedCollector(self.path, self._lock))
        server, _thread = start_http_server(port, addr=host, registry=registry)
        self._server = server
        return int(server.server_address[1])

    def process_dead(self, pid: int) -> None:
        """Bookkeeping for a child that exited: drop its live gauges, fold the rest into the archive."""
        with self._lock:
            mark_process_dead(pid, self.path)
            for f in glob.glob(os.path.join(self.path, f"*_{pid}.db")):
                prefix = os.path.basename(f)[: -len(f"_{pid}.db")]
                if prefix in _ADD or prefix in (_MAX, _MIN, _LATEST):
                    self._fold(prefix, f)

    def _fold(self, prefix: str, dead: str) -> None:
        archive = os.path.join(self.path, f"{prefix}_archive.db")
        merged: dict[str, tuple[float, float]] = {}
        for source in (archive, dead):
            with contextlib.suppress(FileNotFoundError):
                for key, value, ts, _pos in MmapedDict.read_all_values_from_file(source):
                    merged[key] = _combine(prefix, merged.get(key), (value, ts))
        tmp = archive + ".tmp"  # not *.db: a scrape never sees a half-written file
        out = MmapedDict(tmp)
        try:
            for key, (value, ts) in merged.items():
                out.write_value(key, value, ts)
        finally:
            out.close()
        os.replace(tmp, archive)
        os.remove(dead)

    def file_count(self) -> int:
        """How many metric files the directory holds."""
        return len(self._files())

    def close(self) -> None:
        """Stop the endpoint; remove the directory if this object created it."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self.owned:
            shutil.rmtree(self.path, ignore_errors=True)
            if os.environ.get(ENV) == self.path:
                del os.environ[ENV]


def _combine(prefix: str, old: tuple[float, float] | None, new: tuple[float, float]) -> tuple[float, float]:
    if old is None:
        return new
    if prefix == _MAX:
        return max(old, new)
    if prefix == _MIN:
        return min(old, new)
    if prefix == _LATEST:
        return new if new[1] >= old[1] else old
    return old[0] + new[0], max(old[1], new[1])

