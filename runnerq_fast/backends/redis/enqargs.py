"""The arguments of one ``lua/enqueue.lua`` call, selecting the compiled implementation when available.

See :mod:`runnerq_fast.backends.redis._enqargs_py` for the layout and the reference
semantics, and :mod:`runnerq_fast.speedups` for how the implementation is chosen.
"""

from __future__ import annotations

from runnerq_fast.backends.redis._enqargs_py import enqueue_args

__all__ = ["enqueue_args"]
