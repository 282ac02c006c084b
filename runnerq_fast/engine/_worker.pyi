"""Type stub of the compiled per-activity path (``src_pyx/runnerq_fast/engine/_worker.pyx``).

The compiled module has the API of the pure twin's, so the stub re-exports
those names: both selector branches then have one type.
"""

from runnerq_fast.engine._worker_py import Handoff as Handoff
from runnerq_fast.engine._worker_py import run_one as run_one
from runnerq_fast.engine._worker_py import settle as settle
from runnerq_fast.engine._worker_py import worker_loop as worker_loop

__all__ = ["Handoff", "run_one", "settle", "worker_loop"]
