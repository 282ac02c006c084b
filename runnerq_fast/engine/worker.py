"""The engine's per-activity path, selecting the compiled implementation when available.

See :mod:`runnerq_fast.engine._worker_py` for the reference semantics and
:mod:`runnerq_fast.speedups` for how the implementation is chosen.
"""

from __future__ import annotations

from runnerq_fast import speedups

if speedups.enabled:  # the module, not its names: import-linter sees the package, not a compiled module
    from runnerq_fast.engine import _worker

    Handoff = _worker.Handoff
    run_one = _worker.run_one
    settle = _worker.settle
    worker_loop = _worker.worker_loop
else:
    from runnerq_fast.engine._worker_py import Handoff, run_one, settle, worker_loop

__all__ = ["Handoff", "run_one", "settle", "worker_loop"]
