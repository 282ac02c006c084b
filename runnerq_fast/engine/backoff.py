"""Retry backoff (SPEC §3), selecting the compiled implementation when available.

See :mod:`runnerq_fast.engine._backoff_py` for the reference semantics and
:mod:`runnerq_fast.speedups` for how the implementation is chosen.
"""

from __future__ import annotations

from runnerq_fast import speedups

if speedups.enabled:  # the module, not its names: import-linter sees the package, not a compiled module
    from runnerq_fast.engine import _backoff

    backoff_seconds = _backoff.backoff_seconds
else:
    from runnerq_fast.engine._backoff_py import backoff_seconds

__all__ = ["backoff_seconds"]
