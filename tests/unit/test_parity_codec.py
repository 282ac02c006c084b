"""The compiled payload codec and its pure-Python twin agree on every input, errors included."""

from __future__ import annotations

import importlib
import math
from types import ModuleType
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runnerq_fast import _codec_py
from runnerq_fast.errors import InvalidActivityError


def _compiled() -> ModuleType | None:
    try:
        return importlib.import_module("runnerq_fast._codec")
    except ImportError:
        return None


COMPILED = _compiled()
needs_compiled = pytest.mark.skipif(COMPILED is None, reason="the compiled codec is not built")
IMPLS = [pytest.param(_codec_py, id="pure"), pytest.param(COMPILED, id="compiled", marks=needs_compiled)]


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    """A call's result, or its exception type and message, for comparison."""
    try:
        return "ok", fn(*args)
    except Exception as exc:
        return type(exc).__name__, str(exc)


scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)  # beyond 64 bits: both refuse
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=20)  # includes NUL
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5)
    | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=40,
)


def nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for i in range(depth):
        value = [value, None] if i % 2 else {"k": value}
    return value


@needs_compiled
@given(json_values, st.sampled_from([0, 1, 16, 64, 1 << 20]))
def test_encode_agrees(value: Any, max_bytes: int) -> None:
    assert COMPILED is not None
    assert outcome(COMPILED.encode_json, value, max_bytes) == outcome(_codec_py.encode_json, value, max_bytes)


@needs_compiled
@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 3000), st.sampled_from([None, 1.5, math.nan, -math.inf, "\x00", "x"]))
def test_encode_agrees_on_deep_nesting(depth: int, leaf: Any) -> None:
    assert COMPILED is not None
    value = nested(depth, leaf)
    assert outcome(COMPILED.encode_json, value, 0) == outcome(_codec_py.encode_json, value, 0)


@needs_compiled
@settings(max_examples=10, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.integers(1 << 19, 3 << 19), st.sampled_from(["a", "é", "\x00", None]), st.booleans())
def test_encode_agrees_on_large_payloads(size: int, filler: str | None, nan_at_end: bool) -> None:
    assert COMPILED is not None
    items: list[Any] = [filler] * (size // 8)
    if nan_at_end:
        items.append(math.nan)
    value = {"items": items, "blob": "z" * size}
    for limit in (0, 1 << 20, size):
        assert outcome(COMPILED.encode_json, value, limit) == outcome(_codec_py.encode_json, value, limit)


@needs_compiled
@given(st.one_of(json_values.map(lambda v: msgspec.json.encode(v) if _safe(v) else b"[]"), st.binary(max_size=40)))
def test_decode_agrees(data: bytes) -> None:
    assert COMPILED is not None
    for raw in (data, data.decode("utf-8", "replace")):
        assert outcome(COMPILED.decode_json, raw) == outcome(_codec_py.decode_json, raw)


def _safe(v: Any) -> bool:
    try:
        msgspec.json.encode(v)
    except Exception:
        return False
    return True


meta_keys = st.text(max_size=5) | st.integers()


@needs_compiled
@given(st.none() | st.dictionaries(meta_keys, meta_keys, max_size=4))
def test_metadata_agrees(meta: dict[Any, Any] | None) -> None:
    assert COMPILED is not None
    assert outcome(COMPILED.encode_metadata, meta) == outcome(_codec_py.encode_metadata, meta)


@pytest.mark.parametrize("impl", IMPLS)
def test_nan_deeper_than_the_recursion_limit_is_refused(impl: ModuleType) -> None:
    # msgspec encodes ~600 levels; the NaN check used to recurse and raise RecursionError here.
    with pytest.raises(InvalidActivityError, match="NaN or Infinity"):
        impl.encode_json(nested(600, math.nan), 0)


@pytest.mark.parametrize("impl", IMPLS)
def test_codec_behaviour(impl: ModuleType) -> None:
    assert impl.encode_json({"a": [1, 2.5, None]}, 0) == b'{"a":[1,2.5,null]}'
    assert impl.decode_json(b'{"a":[1,2.5,null]}') == {"a": [1, 2.5, None]}
    assert impl.decode_json('{"a":1}') == {"a": 1}
    with pytest.raises(InvalidActivityError, match="NUL"):
        impl.encode_json({"k\x00": 1}, 0)
    with pytest.raises(InvalidActivityError, match="over the limit of 5 bytes"):
        impl.encode_json("123456", 5)
    with pytest.raises(InvalidActivityError, match="result is object, which JSON cannot represent"):
        impl.encode_json(object(), 0, "result")
    with pytest.raises(msgspec.DecodeError):
        impl.decode_json(b"{")
    assert impl.encode_metadata(None) == b"{}"
    assert impl.encode_metadata({"t": "1"}) == b'{"t":"1"}'
    with pytest.raises(InvalidActivityError, match="must be strings"):
        impl.encode_metadata({"t": 1})


foreign = (
    st.binary(max_size=4)
    | st.datetimes()
    | st.dates()
    | st.decimals(allow_nan=False)
    | st.uuids()
    | st.frozensets(st.integers(), max_size=2)
    | st.sets(st.integers(), max_size=2)
    | st.tuples(st.integers())
    | st.builds(object)
)
mixed_values = st.recursive(
    scalars | foreign,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=4) | st.integers(), inner, max_size=4),
    max_leaves=20,
)


@needs_compiled
@given(mixed_values)
def test_encode_agrees_on_values_that_would_not_round_trip(value: Any) -> None:
    assert COMPILED is not None
    assert outcome(COMPILED.encode_json, value, 0) == outcome(_codec_py.encode_json, value, 0)
    assert COMPILED.is_plain_json(value) == _codec_py.is_plain_json(value)


@pytest.mark.parametrize("impl", IMPLS)
@given(json_values)
def test_what_encodes_decodes_to_an_equal_value(impl: ModuleType, value: Any) -> None:
    try:
        data = impl.encode_json(value, 0)
    except InvalidActivityError:
        return
    assert repr(impl.decode_json(data)) == repr(value)
