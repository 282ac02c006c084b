"""Handler call under a timeout, selecting the compiled implementation when available.

See :mod:`runnerq_fast._deadline_py` for the reference semantics and
:mod:`runnerq_fast.speedups` for how the implementation is chosen.
"""

from __future__ import annotations

from runnerq_fast import speedups

if speedups.enabled:
    from runnerq_fast._deadline import Deadlines
else:
    from runnerq_fast._deadline_py import Deadlines

__all__ = ["Deadlines"]
