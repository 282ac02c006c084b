"""Schemathesis hooks for ``test_openapi_schemathesis.py`` (loaded through ``SCHEMATHESIS_HOOKS``).

Three documented inputs that JSON Schema cannot state in full are shaped before each request, so that the
positive check keeps meaning "the document admits it, so the server serves it":

* ``?cursor=``: only text the server made is a cursor (the document gives its alphabet and length; any other
  text is answered 422, as documented). A generated one is dropped.
* ``?wait=``: a long-poll holds the response up to 60 s; a generated wait is cut to 0.2 s to keep the run short.
* ``Idempotency-Key`` and the body's ``idempotency_key``: the same key sent again with another body is refused
  with 422 (documented), and the header must equal the body's key; a valid key (1-1024 characters, no NUL) is
  replaced by a fresh one for each request, and the body's key is left out when the header is sent. An invalid
  key is left as generated, so negative cases stay negative.

When ``RUNNERQ_SCHEMATHESIS_HOOK_LOG`` names a file, every call appends a line to it, so the test can tell that
the hooks were loaded and ran.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import MutableMapping
from typing import Any

import schemathesis

_MAX_KEY = 1024


def _valid_key(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_KEY and "\x00" not in value


@schemathesis.hook
def before_call(ctx: Any, case: Any, kwargs: dict[str, Any]) -> None:
    """Shape ``case`` (see the module's docstring) before it is sent."""
    log = os.environ.get("RUNNERQ_SCHEMATHESIS_HOOK_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{case.method} {case.path}\n")
    query = case.query
    if isinstance(query, MutableMapping):
        if isinstance(query.get("cursor"), str) and query["cursor"]:
            del query["cursor"]
        wait = query.get("wait")
        try:
            long = not isinstance(wait, bool) and float(str(wait)) > 0.2  # a number or its text (coverage phase)
        except ValueError:
            long = False
        if long:
            query["wait"] = 0.2
    headers = case.headers
    body = case.body
    header_key = headers.get("Idempotency-Key") if isinstance(headers, MutableMapping) else None
    if _valid_key(header_key):
        assert isinstance(headers, MutableMapping)
        headers["Idempotency-Key"] = uuid.uuid4().hex
        if isinstance(body, MutableMapping) and _valid_key(body.get("idempotency_key")):
            del body["idempotency_key"]
    elif header_key is None and isinstance(body, MutableMapping) and _valid_key(body.get("idempotency_key")):
        body["idempotency_key"] = uuid.uuid4().hex
    elif isinstance(body, MutableMapping) and isinstance(body.get("activities"), list):  # a batch
        for item in body["activities"]:
            if isinstance(item, MutableMapping) and _valid_key(item.get("idempotency_key")):
                item["idempotency_key"] = uuid.uuid4().hex
