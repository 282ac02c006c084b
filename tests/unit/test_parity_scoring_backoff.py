"""The compiled ready-set score and backoff agree with their pure-Python twins, errors included."""

from __future__ import annotations

import importlib
import math
import random
import struct
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runnerq_fast.backends.redis import _scoring_py
from runnerq_fast.engine import _backoff_py


def _compiled(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"runnerq_fast.{name}")
    except ImportError:
        return None


SCORING = _compiled("backends.redis._scoring")
BACKOFF = _compiled("engine._backoff")
needs_compiled = pytest.mark.skipif(SCORING is None or BACKOFF is None, reason="the compiled modules are not built")
SCORING_IMPLS = [pytest.param(_scoring_py, id="pure"), pytest.param(SCORING, id="compiled", marks=needs_compiled)]
BACKOFF_IMPLS = [pytest.param(_backoff_py, id="pure"), pytest.param(BACKOFF, id="compiled", marks=needs_compiled)]


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    """A call's result (with its type), or its exception type and message."""
    try:
        value = fn(*args)
    except Exception as exc:
        return type(exc).__name__, str(exc)
    if isinstance(value, float) and math.isnan(value):
        return "nan", type(value)
    return "ok", (value, type(value))


# priorities around the valid range, retry counts into the thousands and past 64 bits,
# timestamps far in the past and future (beyond 2**44 ms and 2**63)
any_int = st.integers(-(2**70), 2**70)
priorities = st.integers(-2, 7) | any_int | st.booleans()
retries = st.integers(-5, 100_000) | any_int
ready_ms = st.integers(-(10**15), 2**45) | any_int | st.just(4_102_444_800_000_000)
odd = st.floats(allow_nan=True) | st.none() | st.text(max_size=2)


@needs_compiled
@given(priorities | odd, retries | odd, ready_ms | odd)
def test_encode_score_agrees(p: Any, r: Any, t: Any) -> None:
    assert SCORING is not None
    assert outcome(SCORING.encode_score, p, r, t) == outcome(_scoring_py.encode_score, p, r, t)


@needs_compiled
@given(
    st.floats(allow_nan=True, allow_infinity=True)
    | st.integers(0, 2**64 - 1).map(lambda k: struct.unpack(">d", struct.pack(">Q", k))[0])
    | any_int
    | st.none()
)
def test_decode_score_agrees(score: Any) -> None:
    assert SCORING is not None
    assert outcome(SCORING.decode_score, score) == outcome(_scoring_py.decode_score, score)


@pytest.mark.parametrize("impl", SCORING_IMPLS)
@given(st.integers(1, 4), st.integers(0, 100_000), st.integers(-(10**15), 10**16))
def test_score_round_trip(impl: ModuleType, p: int, r: int, t: int) -> None:
    assert impl.decode_score(impl.encode_score(p, r, t)) == (p, min(r, 65535), min(max(t, 0), 2**44 - 1))


@pytest.mark.parametrize("impl", SCORING_IMPLS)
def test_score_errors(impl: ModuleType) -> None:
    with pytest.raises(ValueError, match=r"priority must be 1\.\.4"):
        impl.encode_score(5, 0, 0)
    with pytest.raises(ValueError, match="retry_count must be >= 0"):
        impl.encode_score(2, -1, 0)
    with pytest.raises(ValueError, match="not a ready-set score"):
        impl.decode_score(-1.0)


floats = st.floats(allow_nan=True, allow_infinity=True) | st.floats(0, 1e6)


@needs_compiled
@given(
    st.integers(-10, 5000) | any_int,
    floats | st.integers(0, 100),
    floats | st.integers(0, 100_000),
    st.floats(0, 1) | st.just(0.0) | floats | st.integers(0, 2),
    st.integers(0, 2**32),
)
def test_backoff_agrees(retry: int, base: Any, cap: Any, jitter: Any, seed: int) -> None:
    assert BACKOFF is not None
    random.seed(seed)
    compiled = outcome(BACKOFF.backoff_seconds, retry, base, cap, jitter)
    random.seed(seed)
    assert compiled == outcome(_backoff_py.backoff_seconds, retry, base, cap, jitter)


@needs_compiled
@given(st.text(max_size=2) | st.none(), st.sampled_from([1.0, "x", None]))
def test_backoff_errors_agree(retry: Any, base: Any) -> None:
    assert BACKOFF is not None
    assert outcome(BACKOFF.backoff_seconds, retry, base) == outcome(_backoff_py.backoff_seconds, retry, base)


@pytest.mark.parametrize("impl", BACKOFF_IMPLS)
@pytest.mark.parametrize(
    ("retry", "expected"), [(-3, 1.0), (0, 1.0), (3, 8.0), (11, 2048.0), (12, 3600.0), (5000, 3600.0), (2**80, 3600.0)]
)
def test_backoff_behaviour(impl: ModuleType, retry: int, expected: float) -> None:
    assert impl.backoff_seconds(retry, 1.0, 3600.0) == expected


@pytest.mark.parametrize("impl", BACKOFF_IMPLS)
def test_backoff_jitter_bounds(impl: ModuleType) -> None:
    values = [impl.backoff_seconds(4, 1.0, 3600.0, 0.5) for _ in range(200)]
    assert all(8.0 <= v <= 16.0 for v in values) and len(set(values)) > 1
