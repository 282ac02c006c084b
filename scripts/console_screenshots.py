"""Screenshots of the console for the README, made from a real run.

Starts ``runnerq-fast serve`` on a fresh SQLite file and a worker of
``tests/browser/console_app.py``, enqueues a mix every second (quick
work, a parent with children, activities that dead-letter, scheduled ones, a
type no worker handles) while the console's dashboard is open in Debian's
headless Chromium (Playwright, ``executable_path``), then saves:

* ``docs/console-dashboard.png`` — the dashboard of queue ``console``;
* ``docs/console-activity.png`` — the page of the parent activity;
* ``docs/console-activities.png`` — the activity browser.

Run from the repository (needs ``apt-get install -y chromium``)::

    .venv/bin/python scripts/console_screenshots.py [--out docs] [--seconds 60]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import sync_playwright

REPO = Path(__file__).resolve().parents[1]
QUEUE = "console"
API = f"/api/v1/queues/{QUEUE}"


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(*args: str, log: Path) -> subprocess.Popen[bytes]:
    """``runnerq-fast ARGS`` as a subprocess of this interpreter, output to ``log``."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "runnerq_fast.cli", *args], cwd=REPO, env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)


def wait_listening(base: str, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"serve did not start (exit {proc.poll()})")
        time.sleep(0.1)


def enqueue(c: httpx.Client, activities: list[dict[str, Any]]) -> list[str]:
    r = c.post(f"{API}/activities/batch", json={"activities": activities})
    r.raise_for_status()
    return [it["id"] for it in r.json()["activities"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs", help="Folder for the PNGs (default docs/).")
    ap.add_argument("--seconds", type=float, default=60.0, help="How long the load runs first (default 60).")
    args = ap.parse_args()
    exe = shutil.which("chromium")
    if exe is None:
        raise SystemExit("needs Debian's chromium: apt-get install -y chromium")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rq-console-") as tmp:
        tmpdir = Path(tmp)
        url = f"sqlite:///{tmpdir / 'console.db'}"
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        server = cli("serve", "--backend", url, "--port", str(port), "--log-level", "warning", log=tmpdir / "serve.log")
        procs = [server]
        try:
            wait_listening(base, server)
            worker = cli("worker", "tests.browser.console_app:engine", "--backend", url, log=tmpdir / "worker.log")
            procs.append(worker)
            with sync_playwright() as pw, httpx.Client(base_url=base, timeout=15) as c:
                browser = pw.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1280, "height": 860}, device_scale_factor=1)
                # the dashboard is open for the whole run (its series start with the first dashboard request)
                page.goto(f"{base}/#/q/{QUEUE}")
                page.wait_for_selector("#view[data-loaded] #counts .card")
                parent = enqueue(c, [{"type": "fanout", "payload": 3, "metadata": {"tenant": "acme"}}])[0]
                deadline = time.monotonic() + args.seconds
                wave = 0
                while time.monotonic() < deadline:
                    wave += 1
                    batch: list[dict[str, Any]] = [
                        {"type": "work", "payload": 0.01 * (i % 5), "priority": 1 + i % 4,
                         "metadata": {"tenant": ("acme", "globex")[i % 2]}} for i in range(20 + 10 * (wave % 4))
                    ]
                    batch += [{"type": "flaky", "payload": str(tmpdir / f"flag-{wave}-{i}"), "max_retries": 0}
                              for i in range(wave % 3)]
                    batch.append({"type": "work", "payload": 1, "delay": 3600})
                    if wave % 4 == 0:
                        batch.append({"type": "send_invoice", "payload": {"order": wave}})
                    enqueue(c, batch)
                    time.sleep(1.0)
                page.screenshot(path=str(args.out / "console-dashboard.png"))
                page.goto(f"{base}/#/q/{QUEUE}/activity/{parent}")
                page.wait_for_selector("#view[data-loaded] #timeline li")
                page.screenshot(path=str(args.out / "console-activity.png"))
                page.goto(f"{base}/#/q/{QUEUE}/activities?status=dead_letter,completed")
                page.wait_for_selector("#view[data-loaded] #results")
                page.screenshot(path=str(args.out / "console-activities.png"))
                browser.close()
        finally:
            for p in reversed(procs):
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
    for name in ("console-dashboard.png", "console-activity.png", "console-activities.png"):
        print(args.out / name)


if __name__ == "__main__":
    main()
