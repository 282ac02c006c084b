"""Type stub of the compiled handler timeout (``src_pyx/runnerq_fast/_deadline.pyx``); semantics in ``_deadline_py``."""

import asyncio
from collections.abc import Callable
from typing import Any

async def call_with_timeout(
    fn: Callable[[Any, Any], Any],
    payload: Any,
    ctx: Any,
    timeout: float | None,
    task: asyncio.Task[Any] | None = None,
) -> Any: ...
