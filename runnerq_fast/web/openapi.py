"""The OpenAPI 3.1 document, generated from the route table and the wire Structs.

Every schema comes from :func:`msgspec.json.schema_components` over the
Structs the routes decode and encode, so the document cannot drift from the
code; nothing here is written by hand but the route summaries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from runnerq_fast.web.wire import PROBLEM_JSON, Problem

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


_ERRORS = {
    400: "Malformed request",
    401: "Missing or wrong bearer token",
    404: "Not found",
    405: "Read-only service",
    409: "Idempotency key conflict",
    413: "Body or batch too large",
    415: "Body is not JSON",
    422: "Invalid input; nothing was stored",
    503: "Backend unavailable",
}


def build_openapi(endpoints: Sequence[Endpoint], *, title: str, version: str, token: bool) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``endpoints``.

    Parameters
    ----------
    endpoints : sequence of Endpoint
        The app's routes.
    title, version : str
        The ``info`` block.
    token : bool
        Whether writing routes need a bearer token (adds the security scheme).
    """
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
            if body is not None:
                entry["content"] = {media: {"schema": schema_of[_key(body)]}}
            elif media and status < 400:
                entry["content"] = {media: {}}
            responses[str(status)] = entry
        for status in _error_statuses(ep, token):
            responses.setdefault(
                str(status), {"description": _ERRORS[status], "content": {PROBLEM_JSON: {"schema": problem}}}
            )
        op["responses"] = responses
        if ep.writes and token:
            op["security"] = [{"bearer": []}]
        paths.setdefault(_openapi_path(ep.path), {})[ep.method.lower()] = op

    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {"schemas": components},
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
    statuses = [503]
    if ep.params or ep.request is not None:
        statuses.append(422)
    if any(p.where == "path" for p in ep.params):
        statuses.append(404)
    if ep.writes:
        statuses += [405] + ([401] if token else [])
    if ep.request is not None:
        statuses += [400, 413, 415]
    return sorted(set(statuses))
