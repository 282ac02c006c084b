"""MkDocs hooks of the docs site (``hooks:`` in mkdocs.yml).

The HTTP API reference is generated at build time from the OpenAPI document
that ``runnerq_fast.web.create_app`` serves at ``/api/openapi.json``: the
document is read from a real app (an ASGI call, no server, no network), the
page's ``<!-- openapi -->`` marker is replaced by one section per operation
(parameters, request body, responses) and one table per schema, and the
document itself is published beside the page as ``reference/openapi.json``; ``benchmarks/peers.png``
(the chart of ``benchmarks/compare.py``) is published as ``peers.png`` for the Performance page.
Nothing is copied by hand, so the page follows the code.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

MARKER = "<!-- openapi -->"
REPO = Path(__file__).resolve().parents[1]
_METHODS = ("get", "post", "put", "patch", "delete")


def openapi_document() -> dict[str, Any]:
    """The document ``GET /api/openapi.json`` answers, from an app with a token set (writes need it)."""
    from runnerq_fast.web import create_app

    app = create_app("memory://", token="docs")
    chunks: list[bytes] = []
    status: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
        "path": "/api/openapi.json", "raw_path": b"/api/openapi.json", "root_path": "", "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8080"), (b"accept", b"application/json")],
        "server": ("127.0.0.1", 8080), "client": ("127.0.0.1", 50000),
    }
    asyncio.run(app(scope, receive, send))
    if status != [200]:
        raise RuntimeError(f"GET /api/openapi.json answered {status}: {b''.join(chunks)[:500]!r}")
    doc: dict[str, Any] = json.loads(b"".join(chunks))
    return doc


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    kind = schema.get("type")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        return f"object of {_type(extra) if isinstance(extra, dict) else 'any'}"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    return f"`{kind}`" if kind else "any JSON"


def _body_schema(content: dict[str, Any]) -> str:
    parts = []
    for media, spec in content.items():
        schema = spec.get("schema")
        parts.append(f"`{media}` {_type(schema)}" if schema else f"`{media}`")
    return ", ".join(parts)


def render(doc: dict[str, Any]) -> str:
    """Markdown for every operation and schema of ``doc``."""
    out: list[str] = [
        f"OpenAPI {doc['openapi']}, *{_cell(doc['info'].get('title', ''))}* {doc['info'].get('version', '')}: "
        "[the document itself](openapi.json) (also served by every app at `/api/openapi.json`).", "",
    ]
    schemes = doc.get("components", {}).get("securitySchemes", {})
    if schemes:
        out += ["Security schemes: " + ", ".join(
            f"`{name}` ({_cell(s.get('type', ''))} {_cell(s.get('scheme', ''))})" for name, s in schemes.items()
        ) + ".", ""]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, ops in doc["paths"].items():
        for method in _METHODS:
            if method in ops:
                op = ops[method]
                by_tag.setdefault((op.get("tags") or ["other"])[0], []).append((method, path, op))
    for tag, ops_of_tag in by_tag.items():
        out += [f"## {tag}", ""]
        for method, path, op in ops_of_tag:
            out += [f"### `{method.upper()} {path}`", "", _cell(op.get("summary", "")), ""]
            if op.get("description"):
                out += [op["description"], ""]
            if op.get("security"):
                out += ["Needs the bearer token when the server has one.", ""]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | required | type | description |", "|---|---|---|---|---|"]
                out += [f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | "
                        f"{_type(p.get('schema', {}))} | {_cell(p.get('description', ''))} |" for p in params]
                out.append("")
            body = op.get("requestBody")
            if body:
                out += [f"Request body{' (required)' if body.get('required') else ''}: "
                        f"{_body_schema(body.get('content', {}))}.", ""]
            out += ["| status | meaning | body |", "|---|---|---|"]
            for code, resp in sorted(op.get("responses", {}).items()):
                out.append(f"| {code} | {_cell(resp.get('description', ''))} | "
                           f"{_body_schema(resp.get('content', {}))} |")
            out.append("")
    out += ["## Schemas", ""]
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        out += [f"### {name}", ""]
        description = schema.get("description", "")
        if description:
            out += [_cell(description.split("\n\n")[0]), ""]
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", []))
            out += ["| field | type | required | description |", "|---|---|---|---|"]
            out += [f"| `{field}` | {_type(spec)} | {'yes' if field in required else 'no'} | "
                    f"{_cell(spec.get('description', ''))} |" for field, spec in props.items()]
            out.append("")
    return "\n".join(out)


_doc: dict[str, Any] = {}


def _document() -> dict[str, Any]:
    if not _doc:
        _doc.update(openapi_document())
    return _doc


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Publish the OpenAPI document as ``reference/openapi.json``, and the peer chart of ``benchmarks/``."""
    files.append(File.generated(config, "reference/openapi.json",
                                content=json.dumps(_document(), indent=2) + "\n"))
    files.append(File.generated(config, "peers.png", abs_src_path=str(REPO / "benchmarks" / "peers.png")))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Replace the OpenAPI marker of a page with the rendered operations and schemas."""
    if MARKER in markdown:
        return markdown.replace(MARKER, render(_document()))
    return markdown
