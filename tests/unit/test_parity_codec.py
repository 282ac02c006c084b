"""The compiled payload codec and its pure-Python twin agree on every input, errors included."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import importlib
import math
import uuid
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


# ------------------------------------------------------------------ typed payloads (issue 27 item 5)
class _Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class _Level(enum.IntEnum):
    HIGH = 3


class _Weird(enum.Enum):
    HALF = 0.5


@dataclasses.dataclass
class _Box:
    inner: Any


@dataclasses.dataclass
class _Pick:
    color: _Color
    days: list[datetime.date]


class _Job(msgspec.Struct):
    items: Any
    at: Any = None


typed_values = st.recursive(
    scalars | foreign | st.times() | st.timedeltas() | st.sampled_from(list(_Color)),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=4) | st.integers(), inner, max_size=4)
    | st.builds(_Job, inner, inner)
    | st.builds(_Box, inner),
    max_leaves=20,
)


@needs_compiled
@given(typed_values, st.sampled_from([0, 64, 1 << 20]))
def test_encode_payload_agrees(value: Any, max_bytes: int) -> None:
    assert COMPILED is not None
    assert outcome(COMPILED.encode_payload, value, max_bytes) == outcome(_codec_py.encode_payload, value, max_bytes)


@needs_compiled
@given(json_values, st.sampled_from([0, 16, 1 << 20]))
def test_encode_payload_is_encode_json_on_plain_values(value: Any, max_bytes: int) -> None:
    assert COMPILED is not None
    plain = outcome(_codec_py.encode_json, value, max_bytes)
    for impl in (COMPILED, _codec_py):
        got = outcome(impl.encode_payload, value, max_bytes)
        assert got == plain if plain[0] == "ok" else got[0] == plain[0]  # the refusal lists the typed values too


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    ("value", "tp", "text"),
    [
        (datetime.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=datetime.UTC), datetime.datetime,
         b'"2026-01-02T03:04:05.000006Z"'),
        (datetime.datetime(2026, 1, 2, 3, 4, 5), datetime.datetime, b'"2026-01-02T03:04:05"'),  # naive stays naive
        (datetime.date(2026, 1, 2), datetime.date, b'"2026-01-02"'),
        (datetime.time(3, 4, 5), datetime.time, b'"03:04:05"'),
        (datetime.timedelta(days=1, microseconds=5), datetime.timedelta, b'"P1DT0.000005S"'),
        (uuid.UUID(int=1), uuid.UUID, b'"00000000-0000-0000-0000-000000000001"'),
        (decimal.Decimal("1.10"), decimal.Decimal, b'"1.10"'),  # the exponent is kept
        (_Color.RED, _Color, b'"red"'),
        (_Level.HIGH, _Level, b"3"),
        (_Pick(_Color.RED, [datetime.date(2026, 1, 2)]), _Pick, b'{"color":"red","days":["2026-01-02"]}'),
        ([uuid.UUID(int=2)], list[uuid.UUID], b'["00000000-0000-0000-0000-000000000002"]'),
        ([_Box(1), None], list[_Box | None], b'[{"inner":1},null]'),
        ({"when": datetime.date(2026, 1, 2)}, dict[str, datetime.date], b'{"when":"2026-01-02"}'),
    ],
)
def test_typed_values_encode_and_decode_back_equal(impl: ModuleType, value: Any, tp: Any, text: bytes) -> None:
    data = impl.encode_payload(value, 0)
    assert data == text
    back = msgspec.json.decode(data, type=tp)
    assert back == value and type(back) is type(value)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b"x", "payload is bytes, which would arrive as base64 text"),
        ((1, 2), "payload is tuple, which would arrive as a list"),
        ({"s": {1}}, 'payload["s"] is set, which would arrive as a list'),
        ({1: "a"}, "payload has key 1 of type int (it would arrive as the str '1')"),
        ({_Color.RED: 1}, "payload has key <_Color.RED: 'red'> of type _Color"),
        ([math.nan], "payload[0] is nan: JSON has no NaN or Infinity"),
        (_Job([1, math.inf]), "payload.items[1] is inf: JSON has no NaN or Infinity"),
        ({"d": decimal.Decimal("NaN")}, "payload[\"d\"] is Decimal('NaN'): JSON has no NaN or Infinity"),
        ([decimal.Decimal("-Infinity")], "payload[0] is Decimal('-Infinity'): JSON has no NaN or Infinity"),
        (_Box(_Job(None, (1,))), "payload.inner.at is tuple"),
        (_Box({".x": b""}), 'payload.inner[".x"] is bytes'),  # a key is never taken for a field
        (_Box(_Weird.HALF), "payload.inner is _Weird.HALF, whose value 0.5 is not a str or an int"),
        (collections.OrderedDict(a=1), "payload is OrderedDict, which would arrive as a plain dict"),
        (object(), "payload is object, which JSON cannot represent"),
        (_Box("\x00"), "payload contains a NUL character"),
        (_Box("x" * 50), "payload is 62 bytes, over the limit of 20 bytes"),
    ],
)
def test_what_cannot_round_trip_is_still_refused_naming_its_path(impl: ModuleType, value: Any, message: str) -> None:
    with pytest.raises(InvalidActivityError) as info:
        impl.encode_payload(value, 20 if "limit" in message else 0)
    assert message in str(info.value)


@pytest.mark.parametrize("impl", IMPLS)
def test_results_and_metadata_stay_plain_json(impl: ModuleType) -> None:
    with pytest.raises(InvalidActivityError, match="result is UUID, which would arrive as a str"):
        impl.encode_json(uuid.UUID(int=1), 0, "result")
    with pytest.raises(InvalidActivityError, match=r'payload\["b"\] is _Box, which would arrive as a dict'):
        impl.encode_json({"b": _Box(1)}, 0)
