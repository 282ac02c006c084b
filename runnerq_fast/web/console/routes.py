"""Serving the console: the page at ``/`` for browsers and its static files under ``/console/``.

``GET /`` answers a browser (``Accept`` naming ``text/html``) with the
console page and every other client with the JSON service index (see
:mod:`runnerq_fast.web.app`). The page carries the app's mount prefix (the
ASGI ``root_path``) in a ``<base href>`` and a ``<meta>``, so every asset and
API call resolves under the prefix wherever the app is mounted.
"""

from __future__ import annotations

import html
from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.staticfiles import StaticFiles

__all__ = ["CSP", "STATIC_DIR", "ConsoleRoutes", "wants_html"]

STATIC_DIR = Path(__file__).with_name("static")
"""The console's files (``index.html``, ``console.css``, ``js/*.js``), package data."""

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'self'; base-uri 'self'; form-action 'none'"
)
"""The page's Content-Security-Policy: its own origin only (nothing from a CDN, no inline script)."""

_ROOT_MARK = "{{ROOT}}"


def wants_html(request: Request) -> bool:
    """Whether the client asks for a page: its ``Accept`` header names ``text/html``.

    Browsers send ``text/html,...`` when they navigate; ``fetch()``, curl and
    httpx send ``*/*`` or ``application/json`` and get the JSON index.
    """
    return "text/html" in request.headers.get("accept", "")


class ConsoleRoutes:
    """The console of one app: its page and its static files.

    Parameters
    ----------
    static_dir : Path
        Where the files are; default :data:`STATIC_DIR`.

    Raises
    ------
    FileNotFoundError
        When ``static_dir`` holds no ``index.html`` (a broken install).
    """

    def __init__(self, static_dir: Path = STATIC_DIR) -> None:
        self._template = (static_dir / "index.html").read_text(encoding="utf-8")
        if _ROOT_MARK not in self._template:
            raise ValueError(f"{static_dir / 'index.html'} has no {_ROOT_MARK} placeholder")
        #: The ASGI app serving ``static_dir`` (mounted at ``/console``).
        self.files = StaticFiles(directory=static_dir)

    def page(self, request: Request) -> Response:
        """The console page, with the mount prefix (``root_path``) written into it."""
        root = html.escape(request.scope.get("root_path", "").rstrip("/"), quote=True)
        body = self._template.replace(_ROOT_MARK, root)
        return HTMLResponse(body, headers={"Cache-Control": "no-cache", "Content-Security-Policy": CSP,
                                           "X-Content-Type-Options": "nosniff", "Vary": "Accept"})
