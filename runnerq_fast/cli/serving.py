"""``runnerq-fast serve``: the HTTP service (:func:`runnerq_fast.web.create_app`) under uvicorn.

uvicorn runs on the CLI's event loop (uvloop unless ``RUNNERQ_LOOP=asyncio``)
with the httptools parser, one process. The socket is bound before the
backend is opened, so a taken port is a one-line error; a non-loopback
address needs a token (``--token`` / ``RUNNERQ_TOKEN``) unless
``--insecure`` says otherwise. A request's headers are bounded in size
(``--max-header-bytes``: 431) and time (``--header-timeout``: 408) by
:func:`runnerq_fast.web.protocol.bounded_protocol`; a loopback server
answers only its own ``Host`` names and ``--allowed-host`` ones
(:mod:`runnerq_fast.web.guard`). On SIGTERM/SIGINT the event streams and
long-polls end first, then open requests finish, then the backend closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import signal
import socket
from collections.abc import Iterator
from typing import Any

import click

from runnerq_fast.cli._common import (
    BadInput,
    Fail,
    FiniteFloatRange,
    backend_option,
    check_queue_name,
    configure_logging,
    err,
    log_level_option,
    open_store,
    require_backend,
    run,
)
from runnerq_fast.urls import redact_url

__all__ = ["is_loopback", "serve"]

TOKEN_ENV = "RUNNERQ_TOKEN"
"""Environment variable holding the bearer token when ``--token`` is not given."""

ALLOWED_HOSTS_ENV = "RUNNERQ_ALLOWED_HOSTS"
"""Environment variable holding ``--allowed-host`` names, separated by blanks."""

log = logging.getLogger("runnerq_fast.web")


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine (``localhost``, 127.0.0.0/8, ``::1``).

    A host name other than ``localhost`` counts as not loopback: it may resolve anywhere.
    """
    h = host.strip().strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def _bind(host: str, port: int) -> socket.socket:
    h = host.strip().strip("[]")
    family = socket.AF_INET6 if ":" in h else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((h, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise Fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


@click.command()
@backend_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535),
              help="TCP port (0: any free port; the one chosen is printed).")
@click.option("--token", envvar=TOKEN_ENV, show_envvar=True, metavar="TOKEN",
              help="Bearer token required by enqueue and actions.")
@click.option("--insecure", is_flag=True, help="Allow a non-loopback address without a token.")
@click.option("--read-only", is_flag=True, help="Serve GET requests only.")
@click.option("--queue", "queues", multiple=True, metavar="NAME", callback=check_queue_name,
              help="Serve only this queue (repeatable; default: any queue).")
@click.option("--cors-origin", "cors_origins", multiple=True, metavar="ORIGIN",
              help="Allow this browser origin (repeatable; default: CORS off).")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME", envvar=ALLOWED_HOSTS_ENV,
              show_envvar=True,
              help="Also answer requests whose Host is NAME (repeatable; '.example.com': it and its subdomains; "
                   "'*': any). Default: on loopback only localhost, 127.0.0.1 and [::1]; elsewhere any Host.")
@click.option("--max-header-bytes", default=64 * 1024, show_default=True, type=click.IntRange(1024),
              help="Largest request line plus headers, bytes; more is answered 431 and the connection closed.")
@click.option("--header-timeout", default=20.0, show_default=True, type=FiniteFloatRange(0, min_open=True),
              help="Seconds a client may take to send a request's headers (a new connection: from its opening); "
                   "later is 408, connection closed.")
@click.option("--access-log", is_flag=True, help="Log every request (costs throughput).")
@log_level_option("info")
def serve(
    backend_url: str | None,
    host: str,
    port: int,
    token: str | None,
    insecure: bool,
    read_only: bool,
    queues: tuple[str, ...],
    cors_origins: tuple[str, ...],
    allowed_hosts: tuple[str, ...],
    max_header_bytes: int,
    header_timeout: float,
    access_log: bool,
    log_level: str,
) -> None:
    """Serve the enqueue API, RunnerQ's REST + SSE routes, /metrics and health over HTTP.

    Writes (enqueue, actions) need 'Authorization: Bearer TOKEN' when a token is
    set. Listening on an address other than loopback needs a token, or --insecure.
    """
    configure_logging(log_level)
    url = require_backend(backend_url)
    if token is not None:
        from runnerq_fast.web.auth import check_token

        try:
            check_token(token)
        except ValueError as exc:
            raise BadInput(f"--token / {TOKEN_ENV}: {exc}") from None
    if allowed_hosts:
        from runnerq_fast.web.guard import check_allowed_hosts

        try:
            check_allowed_hosts(allowed_hosts)
        except ValueError as exc:
            raise BadInput(f"--allowed-host / {ALLOWED_HOSTS_ENV}: {exc}") from None
    if not is_loopback(host) and token is None and not insecure:
        raise BadInput(
            f"refusing to listen on {host} (not loopback) without a token: set --token or {TOKEN_ENV}, "
            "or pass --insecure to serve anyone who can reach it"
        )
    try:
        import uvicorn

        from runnerq_fast.web import create_app
        from runnerq_fast.web.protocol import bounded_protocol
    except ImportError as exc:  # pragma: no cover - both are dependencies
        raise Fail(f"serve needs uvicorn and starlette: {exc}") from None

    sock = _bind(host, port)

    async def main() -> None:
        backend = await open_store(url)
        try:
            try:
                app = create_app(backend, queues=list(queues) or None, token=token, read_only=read_only,
                                 cors_origins=list(cors_origins) or None,
                                 allowed_hosts=list(allowed_hosts) or None)
            except (ValueError, TypeError) as exc:
                raise BadInput(str(exc)) from None
            ctx = app.state.runnerq

            class Server(uvicorn.Server):
                async def shutdown(self, sockets: Any = None) -> None:
                    ctx.begin_shutdown()  # end event streams and long-polls before waiting for connections
                    await super().shutdown(sockets)

                @contextlib.contextmanager
                def capture_signals(self) -> Iterator[None]:
                    # A stop on SIGTERM/SIGINT is a clean exit 0 (uvicorn would re-raise the signal
                    # after its shutdown); a second signal ends the process at once, as for `worker`.
                    loop = asyncio.get_running_loop()

                    def on_signal(sig: int) -> None:
                        if self.should_exit:
                            self.force_exit = True
                        self.should_exit = True

                    for sig in (signal.SIGINT, signal.SIGTERM):
                        loop.add_signal_handler(sig, on_signal, sig)
                    try:
                        yield
                    finally:
                        for sig in (signal.SIGINT, signal.SIGTERM):
                            loop.remove_signal_handler(sig)

            protocol = bounded_protocol(max_header_bytes, header_timeout)
            config = uvicorn.Config(app, http=protocol, lifespan="on", access_log=access_log, proxy_headers=False,
                                    log_level=log_level.lower(), timeout_graceful_shutdown=10, server_header=False)
            server = Server(config)
            bound_host, bound_port = sock.getsockname()[:2]
            shown = f"[{bound_host}]" if ":" in bound_host else bound_host
            err.print(
                f"runnerq-fast serve: listening on http://{shown}:{bound_port} "
                f"(backend {redact_url(url)}; writes {'need the bearer token' if token else 'are open'}"
                f"{'; read-only' if read_only else ''})"
            )
            await server.serve(sockets=[sock])
        finally:
            await backend.close()

    try:
        run(main())
    finally:
        sock.close()
