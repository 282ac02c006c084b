"""What a handler receives besides its payload, selecting the compiled implementation when available.

See :mod:`runnerq_fast.engine._context_py` for the reference semantics and
:mod:`runnerq_fast.speedups` for how the implementation is chosen.
"""

from __future__ import annotations

from runnerq_fast import speedups

if speedups.enabled:  # the module, not its names: import-linter sees the package, not a compiled module
    from runnerq_fast.engine import _context

    ActivityContext = _context.ActivityContext
else:
    from runnerq_fast.engine._context_py import ActivityContext

__all__ = ["ActivityContext"]
