"""Headless Chromium on a page of a second origin, against a real ``serve`` without a token (issue 26, item 1).

Two local servers on two ports: ``runnerq-fast serve`` (loopback, no token:
the default) and a small page server whose page sends what a browser lets
any page send without a CORS preflight: ``fetch(..., {mode: "no-cors"})``
POSTs with ``text/plain`` or no body, and a ``<form enctype="text/plain">``.
Before, those enqueued, cancelled and re-prioritised activities. A name
mapped to 127.0.0.1 (``--host-resolver-rules``) stands for a DNS-rebinding
page, which read every payload.
"""

from __future__ import annotations

import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.acceptance.serve_helpers import ServeProcess
from tests.web_helpers import free_port

Q = "/api/v1/queues/xo/activities"

ATTACK = """<!doctype html><html><body>
<iframe name="sink" style="display:none"></iframe>
<form id="f" method="POST" action="{target}{q}" enctype="text/plain" target="sink">
  <input name='{{"type": "form", "x": "' value='"}}'>
</form>
<form id="g" method="POST" action="{target}{q}/{aid}/cancel" target="sink"><input name="a" value="b"></form>
<script>
const target = "{target}";
const plain = (path, body) => fetch(target + path, {{method: "POST", mode: "no-cors", body,
                                                     headers: {{"Content-Type": "text/plain"}}}});
const bare = (path) => fetch(target + path, {{method: "POST", mode: "no-cors"}});
window.done = Promise.allSettled([
  plain("{q}", '{{"type": "nocors"}}'),
  bare("{q}"),
  bare("{q}/{aid}/cancel"),
  bare("{q}/{aid}/run-now"),
  plain("{q}/{aid}/priority", '{{"priority": "critical"}}'),
  plain("/api/v1/queues/xo/actions/delete", '{{"ids": ["{aid}"]}}'),
  plain("{q}/batch", '{{"activities": [{{"type": "batch"}}]}}'),
]).then((r) => {{ document.getElementById("f").submit(); document.getElementById("g").submit();
                  return r.map((x) => x.status); }});
</script></body></html>"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Debian Chromium in which ``evil.test`` resolves to 127.0.0.1 (a rebinding page's name)."""
    exe = shutil.which("chromium")
    if exe is None:
        message = "Debian's chromium is not installed (apt-get install -y chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, headless=True,
                               args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                                     "--host-resolver-rules=MAP evil.test 127.0.0.1"])
        try:
            yield b
        finally:
            b.close()


class _PageServer:
    """A second origin: serves one HTML page on 127.0.0.1 (another port), in a thread."""

    def __init__(self, html: str) -> None:
        body = html.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://localhost:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServeProcess]:
    s = ServeProcess(["--backend", f"sqlite:///{tmp_path / 'xo.db'}"], tmp_path / "serve.log")
    try:
        yield s
    finally:
        s.close()


def _state(base: str, aid: str) -> tuple[int, str, int]:
    with httpx.Client(base_url=base, timeout=15) as c:
        total = c.get("/api/v1/queues/xo").json()["total"]
        one = c.get(f"{Q}/{aid}").json()["activity"]
    return total, one["status"], one["priority"]


def test_a_page_of_another_origin_cannot_write_and_the_consoles_own_origin_can(
    browser: Browser, server: ServeProcess
) -> None:
    with httpx.Client(base_url=server.base_url, timeout=15) as c:
        r = c.post(Q, json={"type": "kept", "delay": 3600})
    assert r.status_code == 201, r.text
    aid = r.json()["id"]
    before = _state(server.base_url, aid)
    assert before == (1, "scheduled", 2)
    page_server = _PageServer(ATTACK.format(target=server.base_url, q=Q, aid=aid))
    context = browser.new_context()
    try:
        page = context.new_page()
        refused: list[int] = []
        page.on("response", lambda resp: refused.append(resp.status) if resp.url.startswith(server.base_url)
                else None)
        page.goto(page_server.url)
        statuses = page.evaluate("window.done")
        assert statuses == ["fulfilled"] * 7  # opaque no-cors answers: the page learns nothing either
        page.wait_for_timeout(500)  # the two form posts
        assert _state(server.base_url, aid) == before  # nothing stored, nothing cancelled or changed
        assert refused and set(refused) <= {403}, refused

        # the console's own origin: its JSON writes work, a text/plain one does not
        page.goto(server.base_url + "/")
        own = page.evaluate("""async (q) => {
            const json = await fetch(q, {method: "POST", headers: {"Content-Type": "application/json"},
                                         body: JSON.stringify({type: "own"})});
            const text = await fetch(q, {method: "POST", headers: {"Content-Type": "text/plain"},
                                         body: JSON.stringify({type: "text"})});
            return [json.status, text.status];
        }""", Q)
        assert own == [201, 415]
        assert _state(server.base_url, aid)[0] == 2

        # a DNS-rebinding page: its name resolves to 127.0.0.1, the Host header still names it
        resp = page.goto(f"http://evil.test:{server.port}{Q}/{aid}")
        assert resp is not None and resp.status == 400
        assert "kept" not in page.content() and "--allowed-host" in page.content()
    finally:
        context.close()
        page_server.close()
