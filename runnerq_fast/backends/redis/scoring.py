"""Redis ready-set score, selecting the compiled implementation when available.

See :mod:`runnerq_fast.backends.redis._scoring_py` for the bit layout, its limits and the
reference semantics, and :mod:`runnerq_fast.speedups` for how the
implementation is chosen.
"""

from __future__ import annotations

from runnerq_fast import speedups
from runnerq_fast.backends.redis._scoring_py import MAX_READY_MS, MAX_RETRY_RANK

if speedups.enabled:  # the module, not its names: import-linter sees the package, not a compiled module
    from runnerq_fast.backends.redis import _scoring

    decode_score = _scoring.decode_score
    encode_score = _scoring.encode_score
else:
    from runnerq_fast.backends.redis._scoring_py import decode_score, encode_score

__all__ = ["MAX_READY_MS", "MAX_RETRY_RANK", "decode_score", "encode_score"]
