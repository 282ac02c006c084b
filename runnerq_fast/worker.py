"""The engine's per-activity path, selecting the compiled implementation when available.

See :mod:`runnerq_fast._worker_py` for the reference semantics and
:mod:`runnerq_fast.speedups` for how the implementation is chosen.
"""

from __future__ import annotations

from runnerq_fast import speedups

if speedups.enabled:
    from runnerq_fast._worker import Handoff, run_one, settle, worker_loop
else:
    from runnerq_fast._worker_py import Handoff, run_one, settle, worker_loop

__all__ = ["Handoff", "run_one", "settle", "worker_loop"]
