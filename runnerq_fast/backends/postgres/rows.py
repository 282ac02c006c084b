"""Claimed-row decoding and batch parameter arrays, compiled when available.

See :mod:`runnerq_fast.backends.postgres._rows_py` for the reference semantics and
:mod:`runnerq_fast.speedups` for how the implementation is chosen.
"""

from __future__ import annotations

from runnerq_fast import speedups

if speedups.enabled:  # the module, not its names: import-linter sees the package, not a compiled module
    from runnerq_fast.backends.postgres import _rows

    ack_params = _rows.ack_params
    claimed_from_rows = _rows.claimed_from_rows
    enqueue_params = _rows.enqueue_params
    lease_params = _rows.lease_params
else:
    from runnerq_fast.backends.postgres._rows_py import ack_params, claimed_from_rows, enqueue_params, lease_params

__all__ = ["ack_params", "claimed_from_rows", "enqueue_params", "lease_params"]
