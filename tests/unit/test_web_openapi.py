"""The OpenAPI document against the app (memory backend, ASGI transport): what the document refuses, the app
refuses, and what it admits, the app takes; every status answered is documented; a 405 names every method.

The generated run over every operation is ``tests/acceptance/test_openapi_schemathesis.py`` (slow).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import quote

import jsonschema_rs
import pytest
import schemathesis
from schemathesis.core.result import Err, Ok

import runnerq_fast as rq
from runnerq_fast.web import WebLimits, create_app
from tests.web_helpers import asgi_client

Q = "/api/v1/queues/q"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


async def document(app: Any) -> dict[str, Any]:
    async with asgi_client(app) as c:
        r = await c.get("/api/openapi.json")
    assert r.status_code == 200
    doc: dict[str, Any] = r.json()
    return doc


def admits(doc: dict[str, Any], schema: dict[str, Any], value: Any) -> bool:
    """Whether ``value`` fits ``schema`` (its ``$ref`` resolved in ``doc``)."""
    return bool(jsonschema_rs.validator_for({**schema, "components": doc["components"]}).is_valid(value))


def param_schema(doc: dict[str, Any], path: str, method: str, name: str) -> dict[str, Any]:
    (p,) = [p for p in doc["paths"][path][method]["parameters"] if p["name"] == name]
    schema: dict[str, Any] = p["schema"]
    return schema


def body_schema(doc: dict[str, Any], path: str, method: str = "post") -> dict[str, Any]:
    schema: dict[str, Any] = doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    return schema


@pytest.mark.parametrize("token", [None, "t"])
@pytest.mark.parametrize("read_only", [False, True])
async def test_the_document_loads_and_every_operation_parses(token: str | None, read_only: bool) -> None:
    doc = await document(create_app(rq.MemoryBackend(), token=token, read_only=read_only))
    schema = schemathesis.openapi.from_dict(doc)
    results = list(schema.get_all_operations())
    assert [r.err() for r in results if isinstance(r, Err)] == []
    ops = [r.ok() for r in results if isinstance(r, Ok)]
    writes = [op for op in ops if op.method.upper() != "GET"]
    assert len(ops) == sum(len(v) for v in doc["paths"].values()) > 15
    assert bool(writes) is not read_only
    for op in writes:
        statuses = set(op.definition.raw["responses"])
        assert {"400", "403", "415", "503"} <= statuses, op.label
        assert ("401" in statuses) is (token is not None), op.label


async def test_an_activity_key_that_is_no_status_and_no_id_is_a_documented_404() -> None:
    app = create_app(rq.MemoryBackend())
    doc = await document(app)
    async with asgi_client(app) as c:
        r = await c.get("/api/observability/activities/0")
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json", r.text
    assert "404" in doc["paths"]["/api/observability/activities/{key}"]["get"]["responses"]


async def test_limit_zero_is_outside_the_document_and_refused_on_every_listing() -> None:
    app = create_app(rq.MemoryBackend())
    doc = await document(app)
    listings = [(path.replace("{queue}", "q").replace("{key}", "pending"), param_schema(doc, path, "get", "limit"))
                for path, ops in doc["paths"].items()
                if "{id}" not in path and any(p["name"] == "limit" for p in ops.get("get", {}).get("parameters", []))]
    assert len(listings) >= 3
    async with asgi_client(app) as c:
        for path, schema in listings:
            assert not admits(doc, schema, 0) and admits(doc, schema, 1) and admits(doc, schema, schema["maximum"])
            assert not admits(doc, schema, schema["maximum"] + 1)
            for value, status in ((0, 422), (1, 200), (schema["maximum"], 200), (schema["maximum"] + 1, 422)):
                r = await c.get(path, params={"limit": value})
                assert r.status_code == status, (path, value, r.text)


async def test_an_empty_priority_is_outside_the_document_and_refused() -> None:
    app = create_app(rq.MemoryBackend())
    doc = await document(app)
    one = "/api/v1/queues/{queue}/activities/{id}/priority"
    enqueue = "/api/v1/queues/{queue}/activities"
    assert not admits(doc, body_schema(doc, one), {"priority": ""})
    assert admits(doc, body_schema(doc, one), {"priority": "high"})
    assert not admits(doc, body_schema(doc, enqueue), {"type": "t", "priority": ""})
    assert admits(doc, body_schema(doc, enqueue), {"type": "t", "priority": 4})
    async with asgi_client(app) as c:
        made = await c.post(f"{Q}/activities", json={"type": "t", "priority": 4})
        refused = await c.post(f"{Q}/activities", json={"type": "t", "priority": ""})
        changed = await c.post(f"{Q}/activities/{made.json()['id']}/priority", json={"priority": "high"})
        not_changed = await c.post(f"{Q}/activities/{made.json()['id']}/priority", json={"priority": ""})
    assert made.status_code in (201, 202) and changed.status_code == 200, (made.text, changed.text)
    assert refused.status_code == 422 and not_changed.status_code == 422


async def test_an_empty_metadata_filter_is_outside_the_document_and_refused() -> None:
    app = create_app(rq.MemoryBackend())
    doc = await document(app)
    schema = param_schema(doc, "/api/v1/queues/{queue}/activities", "get", "metadata")
    assert not admits(doc, schema, "") and not admits(doc, schema, "=v") and admits(doc, schema, "k=")
    async with asgi_client(app) as c:
        for value, status in (("", 422), ("=v", 422), ("k=", 200), ("k=v", 200)):
            r = await c.get(f"{Q}/activities", params={"metadata": value})
            assert r.status_code == status, (value, r.text)


async def test_an_empty_bulk_body_is_outside_the_document_and_refused_for_every_action() -> None:
    app = create_app(rq.MemoryBackend())
    doc = await document(app)
    actions = [p for p in doc["paths"] if p.startswith("/api/v1/queues/{queue}/actions/")]
    assert len(actions) == 5
    async with asgi_client(app) as c:
        for path in actions:
            schema = body_schema(doc, path)
            extra = {"priority": "high"} if path.endswith("/set-priority") else {}
            assert not admits(doc, schema, {}) and not admits(doc, schema, extra)
            assert admits(doc, schema, {"ids": [], **extra}) and admits(doc, schema, {"filter": {}, **extra})
            url = path.replace("{queue}", "q")
            refused = await c.post(url, json=extra)
            taken = await c.post(url, json={"filter": {}, **extra})
            assert refused.status_code == 422, (path, refused.text)
            assert taken.status_code == 200, (path, taken.text)
        assert not admits(doc, body_schema(doc, "/api/v1/queues/{queue}/actions/retry"),
                          {"ids": [], "priority": "high"})  # priority is set-priority's only


def served_elsewhere(doc: dict[str, Any], url: str, path: str, method: str) -> bool:
    """Whether another path of ``doc`` matches ``url`` and documents ``method``."""
    return any(re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", other), url) and method.lower() in ops
               for other, ops in doc["paths"].items() if other != path)


@pytest.mark.parametrize("read_only", [False, True])
async def test_a_405_names_every_documented_method_of_the_path_in_allow(read_only: bool) -> None:
    app = create_app(rq.MemoryBackend(), read_only=read_only)
    doc = await document(app)
    checked = 0
    async with asgi_client(app) as c:
        for path, ops in doc["paths"].items():
            url = path.replace("{queue}", "q").replace("{id}", "0" * 32).replace("{key}", "pending")
            allowed = {m.upper() for m in ops} | ({"HEAD"} if "get" in ops else set())
            for method in set(METHODS) - allowed:
                if served_elsewhere(doc, url, path, method):
                    continue  # GET .../activities/batch is GET .../activities/{id} with the id 'batch': a 404
                r = await c.request(method, url)
                assert r.status_code == 405, (method, path, r.text)
                assert set(r.headers["allow"].replace(" ", "").split(",")) == allowed, (method, path)
                checked += 1
    assert checked > 20


_INT_QUERIES = [f"{Q}/activities?limit=", "/api/observability/activities/pending?limit=",
                "/api/observability/dead-letter?offset=", "/api/observability/stream?after="]


# (the stream trims its resume id, as it trims Last-Event-ID, an HTTP header's value: " 5" is 5 there)
@pytest.mark.parametrize(("path", "text"), [
    (path, text) for path in _INT_QUERIES for text in ("", "+5", "5_0", "\u0665", "\u00b2", " 5")
    if not (path.endswith("?after=") and text == " 5")
])
async def test_an_integer_query_value_is_ascii_digits_or_a_422(path: str, text: str) -> None:
    """The document says integer: blank, '+5', '5_0' and non-ASCII digits are refused, not taken by int()
    (an '²' in ?after= was a 500)."""
    app = create_app(rq.MemoryBackend())
    async with asyncio.timeout(5), asgi_client(app) as c, c.stream("GET", path + quote(text)) as r:
        assert r.status_code == 422, (path, text)
        assert "json" in r.headers["content-type"]


async def test_a_wait_that_is_not_a_number_is_a_422() -> None:
    async with asgi_client(create_app(rq.MemoryBackend())) as c:
        for text in ("nan", "inf", "", "1_0"):
            r = await c.post(f"{Q}/activities?wait={quote(text)}", json={"type": "t"})
            assert r.status_code == 422, (text, r.text)


async def test_the_batch_limit_in_the_document_is_the_apps() -> None:
    app = create_app(rq.MemoryBackend(), limits=WebLimits(max_batch=3))
    doc = await document(app)
    schema = body_schema(doc, "/api/v1/queues/{queue}/activities/batch")
    three, four = ({"activities": [{"type": "t"}] * n} for n in (3, 4))
    assert admits(doc, schema, three) and not admits(doc, schema, four)
    async with asgi_client(app) as c:
        taken = await c.post(f"{Q}/activities/batch", json=three)
        refused = await c.post(f"{Q}/activities/batch", json=four)
    assert taken.status_code == 201 and refused.status_code == 413, (taken.text, refused.text)
    assert "413" in doc["paths"]["/api/v1/queues/{queue}/activities/batch"]["post"]["responses"]


async def test_the_queue_names_dot_and_dot_dot_are_outside_the_document_and_refused() -> None:
    """A URL path cannot name '.' or '..' (the server refuses them): the document's queue parameters say so."""
    app = create_app(rq.MemoryBackend())
    doc = await document(app)
    path = "/api/v1/queues/{queue}/activities"
    in_path = param_schema(doc, path, "get", "queue")
    in_query = param_schema(doc, "/api/observability/stats", "get", "queue")
    for name in (".", ".."):
        assert not admits(doc, in_path, name) and not admits(doc, in_query, name)
    for name in ("...", ".a", "a.", "q"):
        assert admits(doc, in_path, name) and admits(doc, in_query, name)
    assert admits(doc, in_query, "")  # the default queue
    async with asgi_client(app) as c:
        for name in (".", ".."):
            r = await c.get("/api/observability/stats", params={"queue": name})
            assert r.status_code == 422, r.text
        assert (await c.get("/api/observability/stats", params={"queue": "..."})).status_code == 200


# (text, admitted): RFC 3339 section 5.6 lets "T" and "Z" be lower case and a fraction have any number of digits;
# its ABNF has no space between date and time; neither the server nor the document takes a leap second
_TIMES = (
    ("2030-01-01T00:00:00Z", True),
    ("2030-01-01t00:00:00z", True),
    ("2030-01-01t00:00:00+02:00", True),
    ("2030-01-01T00:00:00.1234567890Z", True),
    ("2030-01-01T00:00:00.123456789012345678901234567890-05:30", True),
    ("2030-01-01 00:00:00Z", False),
    ("2030-01-01T23:59:60Z", False),
    ("2030-01-01T00:00:00.Z", False),
    ("2030-01-01T00:00:00", False),
    ("20300101T000000Z", False),
)


@pytest.mark.parametrize(("text", "admitted"), _TIMES)
async def test_a_time_the_document_admits_is_accepted_and_one_it_refuses_is_a_422(text: str, admitted: bool) -> None:
    """run_at (body), created_after / created_before (query and an action's filter): the document and the server
    agree. Before, the server took 't'/'z' and 10 fraction digits in run_at that the document refused, and a
    space in run_at and an action filter's times; the query filters refused 't'/'z'."""
    app = create_app(rq.MemoryBackend())
    doc = await document(app)
    run_at = body_schema(doc, "/api/v1/queues/{queue}/activities")
    in_query = param_schema(doc, "/api/v1/queues/{queue}/activities", "get", "created_after")
    action = body_schema(doc, "/api/v1/queues/{queue}/actions/cancel")
    assert admits(doc, run_at, {"type": "t", "run_at": text}) is admitted
    assert admits(doc, in_query, text) is admitted
    assert admits(doc, action, {"filter": {"created_before": text}}) is admitted
    want = {True: (201, 200, 200, 200), False: (422, 422, 422, 422)}[admitted]
    async with asgi_client(app) as c:
        got = (
            (await c.post(f"{Q}/activities", json={"type": "t", "run_at": text})).status_code,
            (await c.get(f"{Q}/activities", params={"created_after": text})).status_code,
            (await c.get(f"{Q}/activities/count", params={"created_before": text})).status_code,
            (await c.post(f"{Q}/actions/cancel", json={"filter": {"created_after": text}})).status_code,
        )
    assert got == want, text


async def test_a_time_that_names_no_day_is_a_422() -> None:
    async with asgi_client(create_app(rq.MemoryBackend())) as c:
        r = await c.post(f"{Q}/activities", json={"type": "t", "run_at": "2030-02-30T00:00:00Z"})
        q = await c.get(f"{Q}/activities", params={"created_after": "2030-02-30t00:00:00z"})
    assert r.status_code == q.status_code == 422, (r.text, q.text)
    assert "run_at is not a valid time" in r.json()["detail"]


async def test_a_wait_in_exponent_notation_is_a_number() -> None:
    """The document's ?wait= is a JSON Schema number, which a client may write as 1e-2 (Python's str(0.00001) is
    '1e-05'): the server takes the exponent, as docs/operating/http.md says."""
    doc = await document(create_app(rq.MemoryBackend()))
    assert param_schema(doc, "/api/v1/queues/{queue}/activities", "post", "wait")["type"] == "number"
    async with asgi_client(create_app(rq.MemoryBackend())) as c:
        for text in ("1e-2", "5E-3", ".01"):
            r = await c.post(f"{Q}/activities?wait={quote(text)}", json={"type": "t"})
            assert r.status_code == 202, (text, r.text)  # no worker: still pending when the wait ends


async def test_an_event_s_traceback_is_a_string_or_null_and_the_stream_says_it_leaves_it_out() -> None:
    doc = await document(create_app(rq.MemoryBackend()))
    event = {"$ref": "#/components/schemas/EventView"}
    base = {"id": 1, "activity_id": "a" * 32, "queue": "q", "event_type": "failed",
            "at": "2026-01-01T00:00:00Z", "detail": None}
    assert "traceback" in doc["components"]["schemas"]["EventView"]["properties"]
    assert admits(doc, event, {**base, "traceback": "Traceback (most recent call last):\n"})
    assert admits(doc, event, {**base, "traceback": None})
    assert not admits(doc, event, {**base, "traceback": 3})
    stream = doc["paths"]["/api/observability/stream"]["get"]["responses"]["200"]["description"]
    assert "without traceback" in stream
