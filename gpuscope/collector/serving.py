"""The collector served: its API's listening socket, uvicorn, and the stop on SIGTERM/SIGINT.

Apart from gpuscope/collector/service.py, which builds the service (its jobs around one
store); this runs one until it is told to stop, then stops its jobs and closes the
database cleanly, and ends with one line for a database that refused every write.
"""

from __future__ import annotations

import logging
import signal
import socket
from collections.abc import Callable

from gpuscope.collector.service import CollectorService
from gpuscope.core.errors import UserError
from gpuscope.core.malloc import limit_malloc_arenas
from gpuscope.core.settings import Settings, parse_listen

log = logging.getLogger("gpuscope.collector.service")  # its records keep their name

__all__ = ["bind_listen", "run_collector"]


def bind_listen(host: str, port: int, text: str) -> socket.socket:
    """The API's listening socket, bound here so that a busy or forbidden address is one
    clear line (uvicorn would log it its own way and exit 3).

    Created with ``IPPROTO_TCP`` named and ``TCP_NODELAY`` set: asyncio sets TCP_NODELAY
    on an accepted connection only when its socket's ``proto`` says TCP, and a socket made
    with proto 0 says nothing, so every answer (headers and body go out in two writes)
    waited for the client's delayed ACK, ~40 ms per request on a reused connection. The
    listening socket's TCP_NODELAY is inherited by the connections it accepts (Linux)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {text}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


def run_collector(
    settings: Settings, extend: Callable[[CollectorService], None] | None = None
) -> int:
    """Serve until SIGTERM/SIGINT (uvicorn handles the signals), then stop cleanly.

    ``extend`` adds jobs to the service before it starts (the top-level service adds
    analytics this way, so the collector imports none of the layers above it).
    """
    import uvicorn

    from gpuscope.collector.http_api.api import create_app
    from gpuscope.collector.http_api.api_http import OneWriteH11Protocol
    from gpuscope.collector.http_api.api_server import Dated, QuietServer

    host, port = parse_listen(settings.collector.listen)
    sock = bind_listen(host, port, settings.collector.listen)  # before anything starts
    limit_malloc_arenas()
    service = CollectorService(settings)
    if extend is not None:
        extend(service)
    try:
        app = create_app(service.api_state())
        server = QuietServer(
            uvicorn.Config(
                Dated(app),
                date_header=False,  # Dated stamps each response; uvicorn's is a tick old
                host=host,
                port=port,
                log_level="warning",
                access_log=False,
                lifespan="off",
                http=OneWriteH11Protocol,
            )
        )
        # uvicorn captures SIGTERM/SIGINT while serving and raises them again once it has
        # stopped; with these handlers in place that only ends the serve loop, and the
        # scheduler and the database are then stopped and closed cleanly below.
        stopping: list[int] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, _frame: stopping.append(signum))

        def fatal(message: str) -> None:  # from the writer thread: stop serving, then exit
            service.fatal = message
            server.stop()

        service.on_fatal = fatal
        service.start_jobs()
        log.info(
            "collector serving listen=%s:%s db=%s targets=%d",
            host,
            port,
            settings.collector.db,
            len(service.targets.targets()),
        )
        server.run(sockets=[sock])
        if not server.started and not stopping and not service.fatal:
            raise UserError(f"cannot listen on {settings.collector.listen}")
    finally:
        service.stop()
    if service.fatal:
        raise UserError(service.fatal, exit_code=1)
    log.info("collector stopped")
    return 0
