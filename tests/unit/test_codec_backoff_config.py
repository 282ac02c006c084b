"""Codec validation, backoff formula and configuration checks."""

from __future__ import annotations

import math

import pytest

import runnerq_fast as rq
from runnerq_fast.codec import decode_json, encode_json, encode_metadata
from runnerq_fast.engine.backoff import backoff_seconds


def test_encode_round_trips_nested_values() -> None:
    value = {"a": [1, 2.5, None, True, {"b": "ü€"}], "c": ""}
    assert decode_json(encode_json(value, 1024)) == value


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, [1, [2, {"x": math.nan}]]])
def test_non_finite_floats_are_refused(bad: object) -> None:
    with pytest.raises(rq.InvalidActivityError, match="NaN or Infinity"):
        encode_json({"v": bad}, 0)


def test_none_without_floats_is_fine() -> None:
    assert encode_json({"v": None}, 0) == b'{"v":null}'


def test_nul_is_refused_in_values_and_keys() -> None:
    with pytest.raises(rq.InvalidActivityError, match="NUL"):
        encode_json({"v": "x\x00"}, 0)
    with pytest.raises(rq.InvalidActivityError, match="NUL"):
        encode_json({"\x00": 1}, 0)


def test_size_limit_is_exact() -> None:
    value = "x" * 98  # encodes to 100 bytes with the quotes
    assert len(encode_json(value, 100)) == 100
    with pytest.raises(rq.InvalidActivityError, match="101 bytes"):
        encode_json(value + "x", 100)


def test_unencodable_object_is_refused() -> None:
    with pytest.raises(rq.InvalidActivityError, match=r'payload\["x"\] is object, which JSON cannot represent'):
        encode_json({"x": object()}, 0)


def test_metadata_must_be_strings() -> None:
    assert encode_metadata({"tenant": "t1"}) == b'{"tenant":"t1"}'
    assert encode_metadata(None) == b"{}"
    with pytest.raises(rq.InvalidActivityError):
        encode_metadata({"n": 1})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("retry", "expected"), [(0, 1.0), (1, 2.0), (5, 32.0), (11, 2048.0), (12, 3600.0), (63, 3600.0), (10_000, 3600.0)]
)
def test_backoff_doubles_and_caps_without_overflow(retry: int, expected: float) -> None:
    assert backoff_seconds(retry, 1.0, 3600.0) == expected


def test_backoff_jitter_stays_within_bounds() -> None:
    values = [backoff_seconds(3, 1.0, 3600.0, jitter=0.5) for _ in range(200)]
    assert all(4.0 <= v <= 8.0 for v in values)
    assert len(set(values)) > 1


@pytest.mark.parametrize(
    "settings",
    [
        {"max_workers": 0},
        {"lease_timeout": 0},
        {"ack_flush_interval": -1},
        {"retry_jitter": 2},
        {"queue_name": ""},
        {"heartbeat_interval": 40.0, "lease_timeout": 30.0},
        {"activity_types": "some"},
        {"shutdown_grace": -1},
    ],
)
def test_bad_config_is_config_error(settings: dict[str, object]) -> None:
    with pytest.raises(rq.ConfigError):
        rq.WorkerConfig(**settings)  # type: ignore[arg-type]


def test_engine_rejects_unknown_setting_and_bad_backend() -> None:
    with pytest.raises(rq.ConfigError, match="unknown"):
        rq.WorkerEngine(rq.MemoryBackend(), no_such_setting=1)  # type: ignore[call-arg]
    with pytest.raises(rq.ConfigError):
        rq.WorkerEngine(42)  # type: ignore[arg-type]


def test_heartbeat_defaults_to_a_third_of_the_lease() -> None:
    assert rq.WorkerConfig(lease_timeout=9.0).effective_heartbeat_interval == 3.0


async def test_connect_refuses_unknown_scheme() -> None:
    with pytest.raises(rq.ConfigError, match="unsupported backend URL scheme 'mysql'"):
        await rq.connect("mysql://localhost/db")
    with pytest.raises(rq.ConfigError, match="no backend URL"):
        await rq.connect("")
    with pytest.raises(rq.ConfigError, match="malformed backend URL"):
        await rq.connect("postgresql://postgres@[::1:5432/x")


def test_retryable_error_refuses_negative_retry_after() -> None:
    with pytest.raises(ValueError, match="retry_after"):
        rq.RetryableError("x", retry_after=-1)
