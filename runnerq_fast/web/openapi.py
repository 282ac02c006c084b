"""The OpenAPI 3.1 document, generated from the route table and the wire Structs.

Every schema comes from :func:`msgspec.json.schema_components` over the
Structs the routes decode and encode, so the document cannot drift from the
code; nothing here is written by hand but the route summaries. The limits the
routes enforce are in those types too (see the limits section of
:mod:`runnerq_fast.web.wire`): a request the document admits is served, and
one the server refuses is refused with a status the document gives (a
Schemathesis run against a real server checks both, in the test suite).

Each operation lists every status it can answer: 400 (a path that is not
UTF-8 once decoded, a Host the server does not answer to, a body that is not
JSON), 401 (a write without the bearer token, when one is set), 403 (a write
from another origin), 404, 409, 413 (a body or batch over the limit), 415 (a
write whose body is not ``application/json``), 422 (a value outside the
documented limits) and 503 (the store is unavailable). A read-only server's
document has no write operations: it serves none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from runnerq_fast.web.wire import JSON_VALUE_SCHEMA, PROBLEM_JSON, Problem

__all__ = ["Endpoint", "Param", "build_openapi"]


@dataclass(frozen=True, slots=True)
class Param:
    """A path, query or header parameter of a route."""

    name: str
    where: str  # "path", "query" or "header"
    type: Any
    description: str
    required: bool = False


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One route: what Starlette serves and what the document says about it.

    ``responses`` maps a status code to (description, body type or ``None``,
    media type); error statuses default to :class:`~runnerq_fast.web.wire.Problem`.
    """

    method: str
    path: str
    handler: Callable[..., Any]
    summary: str
    tag: str
    request: Any = None
    responses: dict[int, tuple[str, Any, str]] = field(default_factory=dict)
    params: tuple[Param, ...] = ()
    writes: bool = False
    documented: bool = True


_ERRORS = {
    400: "Malformed request: a path that is not UTF-8 once percent-decoded, a Host this server does not answer "
         "to, a malformed Content-Length, or a body that is not valid JSON",
    401: "Missing or wrong bearer token",
    403: "A write from another origin (Origin or Sec-Fetch-Site)",
    404: "No such queue served here, activity or route",
    409: "Conflict",
    413: "Body or batch over the limit",
    415: "The body is not application/json",
    422: "A value outside the documented limits; nothing was stored or changed",
    503: "The store is unavailable, or the service is shutting down",
}

_ERROR_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"required": True, "schema": {"type": "string"}}},
    503: {"Retry-After": {"required": False, "schema": {"type": "string", "pattern": "^[0-9]+$"}}},
}


def build_openapi(
    endpoints: Sequence[Endpoint], *, title: str, version: str, token: bool, read_only: bool = False
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``endpoints``.

    Parameters
    ----------
    endpoints : sequence of Endpoint
        The app's routes (those with ``documented=False`` are left out).
    title, version : str
        The ``info`` block.
    token : bool
        Whether writing routes need a bearer token (adds the security scheme and 401).
    read_only : bool
        Whether the app is read-only: its document then has no write operation. Default False.

    Returns
    -------
    dict
        The document, ready to encode as JSON.
    """
    endpoints = [ep for ep in endpoints if ep.documented and not (read_only and ep.writes)]
    types: list[Any] = [Problem]
    for ep in endpoints:
        if ep.request is not None:
            types.append(ep.request)
        for _, body, _ in ep.responses.values():
            if body is not None:
                types.append(body)
        for p in ep.params:
            types.append(p.type)
    schemas, components = msgspec.json.schema_components(types, ref_template="#/components/schemas/{name}")
    schema_of = dict(zip(map(_key, types), schemas, strict=True))
    problem = schema_of[_key(Problem)]

    paths: dict[str, dict[str, Any]] = {}
    for ep in endpoints:
        op: dict[str, Any] = {
            "summary": ep.summary,
            "operationId": f"{ep.method.lower()}_{ep.handler.__name__}",
            "tags": [ep.tag],
        }
        if ep.params:
            op["parameters"] = [
                {
                    "name": p.name,
                    "in": p.where,
                    "required": p.required or p.where == "path",
                    "description": p.description,
                    "schema": schema_of[_key(p.type)],
                }
                for p in ep.params
            ]
        if ep.request is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": schema_of[_key(ep.request)]}},
            }
        responses: dict[str, Any] = {}
        for status, (desc, body, media) in sorted(ep.responses.items()):
            entry: dict[str, Any] = {"description": desc}
            if status in _ERROR_HEADERS:
                entry["headers"] = _ERROR_HEADERS[status]
            if body is not None:
                entry["content"] = {media: {"schema": schema_of[_key(body)]}}
            elif media and status < 400:
                entry["content"] = {media: {}}
            responses[str(status)] = entry
        for status in _error_statuses(ep, token):
            entry = {"description": _ERRORS[status], "content": {PROBLEM_JSON: {"schema": problem}}}
            if status in _ERROR_HEADERS:
                entry["headers"] = _ERROR_HEADERS[status]
            responses.setdefault(str(status), entry)
        op["responses"] = responses
        if ep.writes and token:
            op["security"] = [{"bearer": []}]
        paths.setdefault(_openapi_path(ep.path), {})[ep.method.lower()] = op

    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {"schemas": {**components, "JsonValue": JSON_VALUE_SCHEMA}},
    }
    if token:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return doc


def _key(t: Any) -> str:
    return repr(t)


def _openapi_path(path: str) -> str:
    """Starlette's ``{name:converter}`` as OpenAPI's ``{name}``."""
    out = []
    for part in path.split("/"):
        if part.startswith("{") and ":" in part:
            part = part.split(":", 1)[0] + "}"
        out.append(part)
    return "/".join(out)


def _error_statuses(ep: Endpoint, token: bool) -> list[int]:
    """The error statuses ``ep`` can answer besides those it names (see the module docstring)."""
    statuses = {400, 503}
    if ep.params or ep.request is not None:
        statuses.add(422)
    if any(p.where == "path" or p.name == "queue" for p in ep.params):
        statuses.add(404)  # an unknown activity, or a queue this app does not serve
    if ep.writes:
        statuses |= {403, 415} | ({401} if token else set())
    if ep.request is not None:
        statuses.add(413)
    return sorted(statuses)
