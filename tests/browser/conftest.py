"""Fixtures for the console tests: Debian's Chromium driven by Playwright, a real ``serve``, a real worker.

The browser is ``chromium`` from PATH (``apt-get install -y chromium``),
started by Playwright through ``executable_path``; Playwright's own browser
downloads are never used. Without it the tests skip, unless ``CI=true``: then
they fail. Each test gets its own SQLite file, ``serve`` process on a free
port and, when it asks, a worker process (``tests/browser/console_app.py``).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.acceptance.helpers import REPO, WorkerProcess
from tests.acceptance.serve_helpers import ServeProcess

# the machine is shared: give every wait the same generous bound (page loads and expect() assertions)
WAIT_MS = 15_000
expect.set_options(timeout=WAIT_MS)

TOKEN = "console-s3cret"
QUEUE = "console"
API = f"/api/v1/queues/{QUEUE}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """A headless Debian Chromium, one per test module."""
    exe = shutil.which("chromium")
    if exe is None:
        message = "Debian's chromium is not installed (apt-get install -y chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, headless=True,
                               args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


class ConsolePage:
    """A browser tab with what it did: uncaught errors and requests to other origins (there must be none)."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        self.foreign: list[str] = []
        self.requests: list[str] = []
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("request", self._request)

    def _request(self, request: Any) -> None:
        url: str = request.url
        self.requests.append(url)
        host = urlsplit(url).hostname
        if not url.startswith("data:") and host not in ("127.0.0.1", "localhost"):
            self.foreign.append(url)


@pytest.fixture
def console(browser: Browser) -> Iterator[ConsolePage]:
    """A fresh browser context and tab; fails the test on an uncaught page error or a foreign request."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    cp = ConsolePage(context.new_page())
    try:
        yield cp
    finally:
        context.close()
    assert cp.errors == [], f"uncaught errors in the page: {cp.errors}"
    assert cp.foreign == [], f"the console fetched from other origins: {cp.foreign}"


class Stack:
    """One test's SQLite file, ``serve`` processes (restartable on the same port) and workers."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.url = f"sqlite:///{tmp_path / 'console.db'}"
        self.servers: list[ServeProcess] = []
        self.workers: list[WorkerProcess] = []
        self.port: int | None = None

    def serve(self, *args: str, backend: str | None = None) -> ServeProcess:
        """Start ``runnerq-fast serve`` (the same port as the previous one, if any)."""
        s = ServeProcess(["--backend", backend or self.url, "--token", TOKEN, *args],
                         self.tmp_path / f"serve-{len(self.servers)}.log", self.port)
        self.port = s.port
        self.servers.append(s)
        return s

    @property
    def base_url(self) -> str:
        assert self.port is not None, "no server started"
        return f"http://127.0.0.1:{self.port}"

    def worker(self, *args: str) -> WorkerProcess:
        """Start a worker of ``tests/browser/console_app.py`` on the test's SQLite file."""
        w = WorkerProcess(["worker", "tests.browser.console_app:engine", "--backend", self.url, *args],
                          self.tmp_path / f"worker-{len(self.workers)}.log", REPO)
        self.workers.append(w)
        return w

    def client(self) -> httpx.Client:
        """An HTTP client with the token."""
        return httpx.Client(base_url=self.base_url, timeout=15, headers={"Authorization": f"Bearer {TOKEN}"})

    def enqueue(self, *activities: dict[str, Any], queue: str = QUEUE) -> list[str]:
        """Enqueue over HTTP in one batch; the ids."""
        with self.client() as c:
            r = c.post(f"/api/v1/queues/{queue}/activities/batch", json={"activities": list(activities)})
        assert r.status_code == 201, r.text
        return [it["id"] for it in r.json()["activities"]]

    def activity(self, activity_id: str, queue: str = QUEUE) -> dict[str, Any]:
        """The stored activity (``GET .../activities/{id}``)."""
        with self.client() as c:
            r = c.get(f"/api/v1/queues/{queue}/activities/{activity_id}")
        assert r.status_code == 200, r.text
        return r.json()["activity"]  # type: ignore[no-any-return]

    def wait_status(self, activity_id: str, status: str, timeout: float = 15.0) -> None:
        """Block until the activity has ``status``."""
        deadline = time.monotonic() + timeout
        while (now := self.activity(activity_id)["status"]) != status:
            assert time.monotonic() < deadline, f"{activity_id} is {now}, not {status}, after {timeout} s"
            time.sleep(0.05)

    def close(self) -> None:
        for w in self.workers:
            w.close()
        for s in self.servers:
            s.close()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """The test's server and workers, killed at teardown."""
    st = Stack(tmp_path)
    try:
        yield st
    finally:
        st.close()


@pytest.fixture
def open_console(console: ConsolePage, stack: Stack) -> Callable[[str], Page]:
    """Open ``/#<hash>`` of the test's server and wait for the page to have loaded its data."""

    def go(hash_: str = "") -> Page:
        page = console.page
        page.goto(f"{stack.base_url}/#{hash_}")
        page.wait_for_selector("#view[data-loaded]")
        return page

    return go
