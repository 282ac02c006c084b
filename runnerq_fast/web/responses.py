"""HTTP plumbing shared by the routes: JSON responses, RFC 9457 problems, capped bodies.

A route raises :class:`ProblemError`; the app's exception handlers turn it
(and Starlette's own 404/405) into an ``application/problem+json`` response.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import msgspec
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope

from runnerq_fast.web.wire import PROBLEM_JSON, ItemError, Problem, decode, encode

__all__ = [
    "JSON",
    "JsonResponse",
    "ProblemError",
    "backend_error_handler",
    "header_map",
    "http_exception_handler",
    "internal_error_handler",
    "problem_bytes",
    "problem_exception_handler",
    "problem_response",
    "read_asgi_body",
    "read_body",
]

JSON = "application/json"


class JsonResponse(Response):
    """A response whose body is a msgspec-encoded value (Struct, list, dict...)."""

    media_type = JSON

    def __init__(self, content: Any, status_code: int = 200, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(encode(content), status_code, headers)


class ProblemError(Exception):
    """Raised by a route to answer with an RFC 9457 problem.

    Parameters
    ----------
    status : int
        HTTP status code.
    detail : str
        What went wrong and what to change, for a person.
    headers : mapping, optional
        Extra response headers (``WWW-Authenticate``, ``Allow``, ``Retry-After``).
    errors : list of ItemError, optional
        The refused items of a batch.
    existing_id : str, optional
        The activity holding an idempotency key (409).
    """

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        errors: list[ItemError] | None = None,
        existing_id: str | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = dict(headers or {})
        self.errors = errors
        self.existing_id = existing_id


def problem_bytes(exc: ProblemError, instance: str | None) -> bytes:
    """The problem+json body of ``exc``."""
    return encode(
        Problem(
            title=HTTPStatus(exc.status).phrase,
            status=exc.status,
            detail=exc.detail,
            instance=msgspec.UNSET if instance is None else instance,
            errors=msgspec.UNSET if exc.errors is None else exc.errors,
            existing_id=msgspec.UNSET if exc.existing_id is None else exc.existing_id,
        )
    )


def header_map(scope: Scope) -> dict[str, str]:
    """The request headers of an ASGI scope by lower-case name (the last one wins)."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def problem_response(
    status: int,
    detail: str,
    *,
    instance: str | None = None,
    headers: Mapping[str, str] | None = None,
    errors: list[ItemError] | None = None,
    existing_id: str | None = None,
) -> Response:
    """An ``application/problem+json`` response for ``status``."""
    body = Problem(
        title=HTTPStatus(status).phrase,
        status=status,
        detail=detail,
        instance=msgspec.UNSET if instance is None else instance,
        errors=msgspec.UNSET if errors is None else errors,
        existing_id=msgspec.UNSET if existing_id is None else existing_id,
    )
    return Response(encode(body), status, headers, media_type=PROBLEM_JSON)


async def problem_exception_handler(request: Request, exc: Exception) -> Response:
    """Starlette exception handler for :class:`ProblemError`."""
    assert isinstance(exc, ProblemError)
    return problem_response(
        exc.status,
        exc.detail,
        instance=request.url.path,
        headers=exc.headers,
        errors=exc.errors,
        existing_id=exc.existing_id,
    )


_HTTP_DETAILS = {
    404: "no such route; GET /api/openapi.json lists every route",
    405: "method not allowed on this route; see the Allow header",
}


async def http_exception_handler(request: Request, exc: Exception) -> Response:
    """Starlette's own HTTP errors (unknown route, wrong method) as problems."""
    assert isinstance(exc, HTTPException)
    detail = exc.detail if exc.detail and exc.detail != HTTPStatus(exc.status_code).phrase else None
    return problem_response(
        exc.status_code,
        detail or _HTTP_DETAILS.get(exc.status_code, HTTPStatus(exc.status_code).phrase),
        instance=request.url.path,
        headers=exc.headers,
    )


async def backend_error_handler(request: Request, exc: Exception) -> Response:
    """A store that is unreachable or failing (:class:`BackendError`) as 503, with a retry hint."""
    return problem_response(
        503,
        f"the backend is unavailable or failing ({exc}); retry later",
        instance=request.url.path,
        headers={"Retry-After": "1"},
    )


async def internal_error_handler(request: Request, exc: Exception) -> Response:
    """Any other exception as a 500 problem (the traceback goes to the server log)."""
    return problem_response(500, "internal error (see the server log)", instance=request.url.path)


async def read_asgi_body(receive: Receive, declared: str | None, limit: int) -> bytes:
    """The body of an ASGI request, refusing more than ``limit`` bytes (see :func:`read_body`).

    Raises
    ------
    ProblemError
        413 over the limit, 400 for a malformed Content-Length or a client gone mid-body.
    """
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise ProblemError(400, f"malformed Content-Length header {declared!r}") from None
        if size > limit:
            raise ProblemError(413, f"request body is {size} bytes, over the limit of {limit} bytes")
    chunks: list[bytes] = []
    total = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ProblemError(400, "the client disconnected before the body was complete")
        chunk = message.get("body", b"")
        if chunk:
            total += len(chunk)
            if total > limit:
                raise ProblemError(413, f"request body is over the limit of {limit} bytes")
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes.

    A ``Content-Length`` over the limit is refused before anything is read;
    a chunked body is counted as it arrives.

    Raises
    ------
    ProblemError
        413 when the body is over ``limit``; 400 for a malformed Content-Length.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise ProblemError(400, f"malformed Content-Length header {declared!r}") from None
        if size > limit:
            raise ProblemError(413, f"request body is {size} bytes, over the limit of {limit} bytes")
    chunks: list[bytes] = []
    total = 0
    try:
        async for chunk in request.stream():
            total += len(chunk)
            if total > limit:
                raise ProblemError(413, f"request body is over the limit of {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        raise ProblemError(400, "the client disconnected before the body was complete") from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


# a \uXXXX escape of a high surrogate not followed by one of a low surrogate, or a low one not preceded by a high one
_LONE_SURROGATE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def decode_body(body: bytes, into: type[Any]) -> Any:
    """Decode a request body into the wire Struct ``into``, or raise the problem to answer.

    Raises
    ------
    ProblemError
        422 when the JSON does not match the schema; 400 when it is not valid JSON,
        with the reason (a lone UTF-16 surrogate escape such as ``"\\ud800"`` is named
        as such: msgspec calls it "truncated" or "malformed").
    """
    try:
        return decode(body, into)
    except msgspec.ValidationError as exc:
        raise ProblemError(422, f"the body does not match the schema: {exc}") from None
    except msgspec.DecodeError as exc:
        lone = _LONE_SURROGATE.search(body)
        if lone is not None:
            raise ProblemError(400, f"the body is not valid JSON: the escape {lone.group().decode()} at byte "
                                    f"{lone.start()} is a lone UTF-16 surrogate (no Unicode text holds "
                                    "one)") from None
        raise ProblemError(400, f"the body is not valid JSON: {exc}") from None
