"""The console in a real headless Chromium, against a real ``serve`` process and a real worker process.

Each test has its own SQLite file and server (token ``TOKEN``); the pages are
driven the way an operator would: navigate, read, click, confirm.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.browser.conftest import QUEUE, TOKEN, ConsolePage, Stack


def card(page: Page, status: str) -> str | None:
    """The count a dashboard card shows (its data-count attribute)."""
    return page.locator(f'#counts [data-status="{status}"]').get_attribute("data-count")


def confirm(page: Page) -> None:
    """Press Confirm in the console's confirmation dialog."""
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_be_visible()
    dialog.locator("#confirm-yes").click()
    expect(dialog).to_be_hidden()


def set_token(page: Page) -> None:
    page.fill("#token", TOKEN)
    page.press("#token", "Enter")


def test_the_dashboard_counts_change_while_a_worker_drains(
    stack: Stack, open_console: Callable[[str], Page]
) -> None:
    stack.serve()
    n = 40
    stack.enqueue(*[{"type": "work", "payload": 0.15} for _ in range(n)])
    page = open_console(f"/q/{QUEUE}")
    expect(page.locator('#counts [data-status="pending"]')).to_have_attribute("data-count", str(n))
    # every value the completed card shows, as the page changes it (no reload)
    page.evaluate("""() => {
        window.seen = [];
        const box = document.getElementById('counts');
        new MutationObserver(() => {
            const c = box.querySelector('[data-status="completed"]');
            if (c) window.seen.push(Number(c.dataset.count));
        }).observe(box, {childList: true, subtree: true});
    }""")
    loads_before = int(page.locator("#view").get_attribute("data-loaded") or 0)
    stack.worker()
    expect(page.locator('#counts [data-status="completed"]')).to_have_attribute("data-count", str(n), timeout=30_000)
    expect(page.locator('#counts [data-status="pending"]')).to_have_attribute("data-count", "0")
    seen: list[int] = page.evaluate("window.seen")
    assert any(0 < v < n for v in seen), f"the page never showed the drain in progress: {seen}"
    assert seen == sorted(seen), seen
    assert int(page.locator("#view").get_attribute("data-loaded") or 0) > loads_before
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1  # never reloaded
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
