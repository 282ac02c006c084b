"""Schemathesis hooks for ``test_openapi_schemathesis.py`` (loaded through ``SCHEMATHESIS_HOOKS``).

Three documented inputs that JSON Schema cannot state in full are shaped before each request, so that the
positive check keeps meaning "the document admits it, so the server serves it":

* ``?cursor=``: only text the server made is a cursor (the document gives its alphabet and length; any other
  text is answered 422, as documented). A generated one is dropped.
* ``?wait=``: a long-poll holds the response up to 60 s; a generated wait is cut to 0.2 s to keep the run short.
* ``Idempotency-Key``: the same key sent again with another body is refused with 422 (documented), and the
  header must equal the body's ``idempotency_key``; each request gets a key of its own, and the body's key is
  left out when the header is sent.
"""

from __future__ import annotations

import uuid
from typing import Any

import schemathesis


@schemathesis.hook
def before_call(ctx: Any, case: Any, kwargs: dict[str, Any]) -> None:
    query = case.query
    if isinstance(query, dict):
        if isinstance(query.get("cursor"), str) and query["cursor"]:
            del query["cursor"]
        wait = query.get("wait")
        try:
            long = float(str(wait)) > 0.2  # a number, or its text (the coverage phase sends text)
        except ValueError:
            long = False
        if long and not isinstance(wait, bool):
            query["wait"] = 0.2
    headers = case.headers
    if isinstance(headers, dict) and isinstance(headers.get("Idempotency-Key"), str) and headers["Idempotency-Key"]:
        headers["Idempotency-Key"] = uuid.uuid4().hex
        if isinstance(case.body, dict) and "idempotency_key" in case.body:
            del case.body["idempotency_key"]
