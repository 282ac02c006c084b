"""Serving the console: the page for browsers at ``/`` (the JSON index for API clients), the mount prefix
written into it, its static files, and the files shipped as package data."""

from __future__ import annotations

import re

import httpx
from starlette.applications import Starlette
from starlette.routing import Mount

import runnerq_fast as rq
from runnerq_fast.web import create_app
from runnerq_fast.web.console import STATIC_DIR
from tests.web_helpers import asgi_client

BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


async def test_a_browser_gets_the_console_and_an_api_client_the_json_index() -> None:
    async with asgi_client(create_app(rq.MemoryBackend(), token="t", read_only=True)) as c:
        page = await c.get("/", headers=BROWSER)
        index = await c.get("/")
        as_json = await c.get("/", headers={"Accept": "application/json"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="console/js/main.js">' in page.text
    assert '<base href="/">' in page.text and "{{ROOT}}" not in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["vary"] == "Accept" and index.headers["vary"] == "Accept"
    assert index.headers["content-type"].startswith("application/json") and as_json.json() == index.json()
    body = index.json()
    assert body["service"] == "runnerq-fast" and body["console"] == "/"
    assert body["read_only"] is True and body["token_required"] is True
    assert body["statuses"] == ["pending", "scheduled", "processing", "retrying", "completed", "failed",
                                "dead_letter", "cancelled"]
    assert body["actions"]["run-now"] == ["retrying", "scheduled"]
    assert set(body["actions"]) == {"retry", "cancel", "run-now", "set-priority", "delete"}


async def test_the_page_and_its_files_resolve_under_the_mount_prefix() -> None:
    outer = Starlette(routes=[Mount("/ops/queue", create_app(rq.MemoryBackend()))])
    async with asgi_client(outer) as c:
        page = await c.get("/ops/queue/", headers=BROWSER)
        index = (await c.get("/ops/queue/")).json()
        js = await c.get("/ops/queue/console/js/main.js")
        css = await c.get("/ops/queue/console/console.css")
        missing = await c.get("/ops/queue/console/js/nope.js")
    assert '<base href="/ops/queue/">' in page.text and '<meta name="rq-root" content="/ops/queue">' in page.text
    assert index["console"] == "/ops/queue/" and index["openapi"] == "/ops/queue/api/openapi.json"
    assert js.status_code == 200 and "javascript" in js.headers["content-type"] and "import " in js.text
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert missing.status_code == 404


async def test_a_root_path_with_markup_is_escaped_in_the_page() -> None:
    app = create_app(rq.MemoryBackend())
    transport = httpx.ASGITransport(app=app, root_path='/x"><script>')
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        page = await c.get('/x"><script>/', headers=BROWSER)
    assert page.status_code == 200
    assert "<script>" not in page.text.replace('<script type="module"', "")
    assert 'href="/x&quot;&gt;&lt;script&gt;/"' in page.text


def test_every_module_the_page_imports_is_a_file_and_nothing_comes_from_elsewhere() -> None:
    files = {p.relative_to(STATIC_DIR).as_posix() for p in STATIC_DIR.rglob("*") if p.is_file()}
    assert {"index.html", "console.css", "js/main.js", "js/live-worker.js"} <= files
    for name in files:
        text = (STATIC_DIR / name).read_text(encoding="utf-8")
        assert not re.search(r"""(?:src|href)=["']?(?:https?:)?//""", text), f"{name} loads from another origin"
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text, name
        if name.endswith(".js"):
            for dep in re.findall(r"""from\s+["'](\.[^"']+)["']""", text):
                target = (STATIC_DIR / name).parent / dep
                assert target.is_file(), f"{name} imports {dep}, which is not shipped"
