"""The agent's HTTP endpoint: ``/metrics`` (Prometheus or OpenMetrics) and ``/healthz``.

The standard library's threading server is enough for one scraper or two and keeps the
agent image free of a web framework. ``gpuscope agent`` serves the collector's own page
(:meth:`AgentCollector.render`, written without prometheus_client); a server given a
prometheus_client registry instead serves what that registry collects (tests compare the two).

The exposition drops and counts what it cannot encode, so ``/metrics`` should never fail;
if it does all the same, ``/healthz`` says so (503 with the error) until a page goes out
again, rather than "ok" beside a failing scrape.
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from gpuscope.agent.exposition import AgentCollector
from gpuscope.agent.page import negotiate
from gpuscope.agent.process_metrics import ProcessMetrics

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

log = logging.getLogger(__name__)


def accepts_gzip(header: str) -> bool:
    """Whether an ``Accept-Encoding`` header takes gzip (RFC 9110: ``gzip;q=0`` refuses it,
    ``*`` takes it unless gzip is named with q=0). Prometheus sends ``gzip``."""
    star = False
    for entry in header.split(","):
        name, _, params = entry.strip().partition(";")
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        coding = name.strip().lower()
        if coding in ("gzip", "x-gzip"):
            return q > 0
        if coding == "*":
            star = q > 0
    return star


class _Handler(BaseHTTPRequestHandler):
    server: AgentHttpServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out as separate writes on a keep-alive connection; with Nagle's
    # algorithm a small body then waits for the scraper's delayed ACK (~40 ms a scrape).
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            try:
                body, content_type = self.server.page(self.headers.get("Accept", ""))
            except Exception as exc:  # a scrape must answer even if exposition broke
                log.exception("exposition failed error=%s", exc)
                self.server.exposition_error = f"{type(exc).__name__}: {exc}"
                self._send(500, b"exposition failed\n", "text/plain; charset=utf-8")
                return
            self.server.exposition_error = ""
            if accepts_gzip(self.headers.get("Accept-Encoding", "")):
                # level 1: a 34 kB InfiniBand page shrinks to ~3 kB for ~0.03 ms of CPU
                body = gzip.compress(body, compresslevel=1, mtime=0)
                self._send(200, body, content_type, encoding="gzip")
            else:
                self._send(200, body, content_type)
        elif path == "/healthz":
            results = [
                {"source": r.source, "up": r.ok, "seconds": round(r.seconds, 6), "error": r.error}
                for r in self.server.collector.last_results
            ]
            failing = self.server.exposition_error
            health = {
                "status": "exposition failing" if failing else "ok",
                "node": self.server.collector.node,
                "sources": results,
            }
            if failing:
                health["error"] = failing
            self._send(503 if failing else 200, json.dumps(health).encode(), "application/json")
        else:
            self._send(404, b"not found; try /metrics or /healthz\n", "text/plain; charset=utf-8")

    def _send(self, status: int, body: bytes, content_type: str, encoding: str = "") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if encoding:
            self.send_header("Content-Encoding", encoding)
        if self.path.split("?", 1)[0] == "/metrics":
            self.send_header("Vary", "Accept-Encoding")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("http %s", format % args)


class AgentHttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        registry: Collector | None,
        collector: AgentCollector,
        *,
        process_metrics: bool = True,
    ) -> None:
        #: None: serve the collector's own page, with the process's series unless
        #: ``process_metrics`` is False (several agents in one process, as in the demo).
        self.registry = registry
        self.collector = collector
        self._process = ProcessMetrics() if process_metrics else None
        #: Why the last /metrics failed; "" after one that answered.
        self.exposition_error = ""
        super().__init__(address, _Handler)

    def page(self, accept: str) -> tuple[bytes, str]:
        """The body and content type of one scrape, in the format ``accept`` asks for."""
        if self.registry is None:
            openmetrics, content_type = negotiate(accept)
            return self.collector.render(openmetrics=openmetrics, process=self._process), (
                content_type
            )
        from prometheus_client.exposition import choose_encoder, generate_latest

        from gpuscope.agent.textformat import generate_text

        encoder, content_type = choose_encoder(accept)
        if encoder is generate_latest:
            encoder = generate_text
        return encoder(self.registry), content_type

    def server_close(self) -> None:
        super().server_close()
        if self._process is not None:
            self._process.close()

    def start_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="agent-http", daemon=True)
        thread.start()
        return thread
