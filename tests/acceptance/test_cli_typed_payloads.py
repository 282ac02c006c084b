"""Issue 27 item 5 from the CLI: ``runnerq-fast enqueue --payload JSON`` reaches a typed handler as its type."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import runnerq_fast as rq
from tests.acceptance.helpers import run_cli
from tests.typed_payloads import ORDER_ID, SAMPLE_JSON, sample_order, typed_engine


async def test_a_payload_enqueued_by_the_cli_is_decoded_into_the_handler_type(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'typed.db'}"
    assert run_cli("migrate", "--backend", url).returncode == 0
    ok = run_cli("enqueue", "order", "--queue", "shop", "--payload", json.dumps(SAMPLE_JSON), "--backend", url)
    bad = run_cli("enqueue", "refund", "--queue", "shop", "--payload", '{"order_id": 1, "cents": 2}',
                  "--backend", url)
    assert ok.returncode == 0 and bad.returncode == 0, ok.stderr + bad.stderr
    received: list[Any] = []
    backend = await rq.connect(url)
    try:
        engine = typed_engine(backend, "shop", received)
        async with engine:
            assert await engine.executor.future(ok.stdout.strip()).result(timeout=10) == f"{ORDER_ID} 19.90"
            with pytest.raises(rq.ActivityFailed) as info:
                await engine.executor.future(bad.stdout.strip()).result(timeout=10)
    finally:
        await backend.close()
    assert received == [sample_order()]
    assert info.value.status == "dead_letter"
    assert info.value.error == ("payload does not match Refund, the handler's payload type: Expected `uuid`, got "
                                "`int` - at `$.order_id`")
