"""Redis ready-set score, selecting the compiled implementation when available.

See :mod:`runnerq_fast._scoring_py` for the bit layout, its limits and the
reference semantics, and :mod:`runnerq_fast.speedups` for how the
implementation is chosen.
"""

from __future__ import annotations

from runnerq_fast import speedups
from runnerq_fast._scoring_py import MAX_READY_MS, MAX_RETRY_RANK

if speedups.enabled:
    from runnerq_fast._scoring import decode_score, encode_score
else:
    from runnerq_fast._scoring_py import decode_score, encode_score

__all__ = ["MAX_READY_MS", "MAX_RETRY_RANK", "decode_score", "encode_score"]
