"""Type stub of the compiled ready-set score (``src_pyx/runnerq_fast/backends/redis/_scoring.pyx``).

Semantics in ``_scoring_py``.
"""

MAX_READY_MS: int
MAX_RETRY_RANK: int

def encode_score(priority: int, retry_count: int, ready_ms: int) -> float: ...
def decode_score(score: float) -> tuple[int, int, int]: ...
