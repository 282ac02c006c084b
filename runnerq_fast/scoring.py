"""Redis ready-set score, selecting the compiled implementation when available.

See :mod:`runnerq_fast._scoring_py` for the bit layout, its limits and the
reference semantics.
"""

from __future__ import annotations

from runnerq_fast._scoring_py import MAX_READY_MS, MAX_RETRY_RANK, decode_score, encode_score

__all__ = ["MAX_READY_MS", "MAX_RETRY_RANK", "decode_score", "encode_score"]
