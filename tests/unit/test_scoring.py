"""The Redis ready-set score sorts exactly in the SPEC claim order."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runnerq_fast.backends.redis.scoring import MAX_READY_MS, MAX_RETRY_RANK, decode_score, encode_score

priorities = st.integers(1, 4)
retries = st.integers(0, MAX_RETRY_RANK)
ready = st.integers(0, MAX_READY_MS)


def spec_key(priority: int, retry_count: int, ready_ms: int) -> tuple[int, int, int]:
    return (-priority, -retry_count, ready_ms)


@given(st.tuples(priorities, retries, ready), st.tuples(priorities, retries, ready))
def test_score_order_equals_spec_order(a: tuple[int, int, int], b: tuple[int, int, int]) -> None:
    sa, sb = encode_score(*a), encode_score(*b)
    assert (sa < sb) == (spec_key(*a) < spec_key(*b))
    assert (sa == sb) == (a == b)


@given(priorities, retries, ready)
def test_score_round_trips_and_is_a_normal_finite_double(p: int, r: int, t: int) -> None:
    score = encode_score(p, r, t)
    assert math.isfinite(score) and score > 0
    # Redis prints scores with 17 significant digits and parses them back.
    assert float(f"{score:.17g}") == score
    assert decode_score(score) == (p, r, t)


def test_extremes_saturate_and_clamp() -> None:
    assert decode_score(encode_score(4, 10**9, -5)) == (4, MAX_RETRY_RANK, 0)
    assert decode_score(encode_score(1, 0, 10**18)) == (1, 0, MAX_READY_MS)
    # A boundary: the most favoured LOW still sorts after the least favoured NORMAL.
    assert encode_score(2, 0, MAX_READY_MS) < encode_score(1, MAX_RETRY_RANK, 0)


@pytest.mark.parametrize(("priority", "retry_count"), [(0, 0), (5, 0), (-1, 0), (2, -1)])
def test_bad_fields_are_refused(priority: int, retry_count: int) -> None:
    with pytest.raises(ValueError):
        encode_score(priority, retry_count, 0)


@pytest.mark.parametrize("score", [0.0, 1e-300, -1.0, float("inf"), 2.0**1000])
def test_decode_refuses_foreign_scores(score: float) -> None:
    with pytest.raises(ValueError):
        decode_score(score)
