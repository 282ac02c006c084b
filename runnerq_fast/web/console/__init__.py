"""The browser console: static pages served by the app at ``/`` (dashboard, activity browser, actions).

The pages are vanilla JavaScript ES modules and one stylesheet under
``static/``, shipped as package data: no build step, nothing fetched from a
CDN (the page's Content-Security-Policy allows its own origin only). They run
on the HTTP routes of :mod:`runnerq_fast.web` and nothing else. Modules:

* :mod:`.routes` — the HTML page (with the mount prefix, ASGI ``root_path``,
  written into it) and the static files under ``/console/``.
"""

from runnerq_fast.web.console.routes import STATIC_DIR, ConsoleRoutes, wants_html

__all__ = ["STATIC_DIR", "ConsoleRoutes", "wants_html"]
