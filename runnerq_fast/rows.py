"""Claimed-row decoding and batch parameter arrays, compiled when available.

See :mod:`runnerq_fast._rows_py` for the reference semantics and
:mod:`runnerq_fast.speedups` for how the implementation is chosen.
"""

from __future__ import annotations

from runnerq_fast import speedups

if speedups.enabled:
    from runnerq_fast._rows import ack_params, claimed_from_rows, enqueue_params, lease_params
else:
    from runnerq_fast._rows_py import ack_params, claimed_from_rows, enqueue_params, lease_params

__all__ = ["ack_params", "claimed_from_rows", "enqueue_params", "lease_params"]
