"""msgspec vs orjson on the codec's two jobs (why the codec uses msgspec only).

orjson is not a dependency; this benchmark runs when it happens to be
installed (``pip install orjson``)::

    .venv/bin/python -m pytest benchmarks/micro/test_json_libraries.py -m bench --benchmark-group-by=group
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

orjson = pytest.importorskip("orjson")

pytestmark = pytest.mark.bench

SMALL = {"order_id": 42, "to": "a@b.c", "items": [1, 2, 3]}
LARGE = {"lines": [{"sku": f"s{i}", "qty": i, "price": i * 1.5, "tags": ["a", "b"]} for i in range(2000)]}
_enc = msgspec.json.Encoder().encode
_dec = msgspec.json.Decoder().decode
ENCODERS: dict[str, Callable[[Any], bytes]] = {"msgspec": _enc, "orjson": orjson.dumps}
DECODERS: dict[str, Callable[[bytes], Any]] = {"msgspec": _dec, "orjson": orjson.loads}


@pytest.mark.parametrize("lib", ["msgspec", "orjson"])
@pytest.mark.parametrize(("label", "value"), [("small", SMALL), ("large", LARGE)])
def test_encode(benchmark: Any, lib: str, label: str, value: Any) -> None:
    benchmark.group = f"json encode {label}"
    assert _dec(benchmark(ENCODERS[lib], value)) == value


@pytest.mark.parametrize("lib", ["msgspec", "orjson"])
@pytest.mark.parametrize(("label", "value"), [("small", SMALL), ("large", LARGE)])
def test_decode(benchmark: Any, lib: str, label: str, value: Any) -> None:
    benchmark.group = f"json decode {label}"
    assert benchmark(DECODERS[lib], _enc(value)) == value
