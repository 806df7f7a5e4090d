"""The agent's HTTP endpoint: ``/metrics`` (Prometheus or OpenMetrics) and ``/healthz``.

A threading server on the standard library's ``socketserver`` is enough for one scraper or
two and keeps the agent image free of a web framework. It speaks the HTTP/1.1 a scraper
speaks (GET, keep-alive, ``Connection: close``, HTTP/1.0) and answers anything else with
one status line: not ``http.server``, whose header parsing pulls in the ``email`` package,
``http.client`` and OpenSSL, about 3 MiB of the agent's memory (issue 24). Requests are
bounded (line length, header count, body size) as ``http.server`` bounds them.
``gpuscope agent`` serves the collector's own page (:meth:`AgentCollector.render`, written
without prometheus_client); a server given a prometheus_client registry instead serves
what that registry collects (tests compare the two).

The exposition drops and counts what it cannot encode, so ``/metrics`` should never fail;
if it does all the same, ``/healthz`` says so (503 with the error) until a page goes out
again, rather than "ok" beside a failing scrape.
"""

from __future__ import annotations

import gzip
import json
import logging
import socketserver
import threading
import time
from typing import TYPE_CHECKING

from gpuscope.agent.serving.exposition import AgentCollector
from gpuscope.agent.serving.page import negotiate
from gpuscope.agent.serving.process_metrics import ProcessMetrics

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

#: Longest request or header line, most headers and largest request body taken (the bounds
#: of http.server and http.client: 64 KiB lines, 100 headers); past them the connection closes.
MAX_LINE = 65536
MAX_HEADERS = 100
MAX_BODY = 1 << 20
REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}
_TEXT = "text/plain; charset=utf-8"


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


class _Handler(socketserver.StreamRequestHandler):
    server: AgentHttpServer
    # Headers and body go out in one write; without Nagle's algorithm a small page never
    # waits for the scraper's delayed ACK (~40 ms a scrape) either way.
    disable_nagle_algorithm = True

    def handle(self) -> None:
        try:
            while self._one_request():
                pass
        except (ConnectionError, TimeoutError):
            pass  # the scraper went away: nothing to answer

    def _line(self) -> bytes | None:
        """One line of the request head; None when it is too long (the connection closes)."""
        line = self.rfile.readline(MAX_LINE + 1)
        return None if len(line) > MAX_LINE else line

    def _one_request(self) -> bool:
        """Read and answer one request; whether the connection stays open for another."""
        line = self._line()
        if line is None:
            return self._refuse(400, "request line too long")
        if not line.strip():
            return False  # the scraper closed the connection (or sent nothing)
        parts = line.decode("iso-8859-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return self._refuse(400, "bad request line")
        method, target, version = parts
        if version not in ("HTTP/1.0", "HTTP/1.1"):
            return self._refuse(505, f"{version} is not served")
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            raw = self._line()
            if raw is None:
                return self._refuse(431, "header line too long")
            if raw in (b"\r\n", b"\n", b""):
                break
            name, sep, value = raw.decode("iso-8859-1").partition(":")
            if not sep or not name.strip() or name != name.strip():
                return self._refuse(400, "bad header line")
            headers.setdefault(name.lower(), value.strip())  # the first of a repeated one
        else:
            return self._refuse(431, "too many headers")
        if "transfer-encoding" in headers:
            return self._refuse(501, "request bodies in chunks are not taken")
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            return self._refuse(400, "bad Content-Length")
        if not 0 <= length <= MAX_BODY:
            return self._refuse(413, "request body too large")
        if length:
            self.rfile.read(length)  # a GET has no use for a body: read past it
        connection = headers.get("connection", "").lower()
        keep = connection != "close" and (version == "HTTP/1.1" or connection == "keep-alive")
        log.debug("http %s %s %s", self.client_address[0], method, target)
        if method != "GET":
            self._send(501, f"unsupported method {method}\n".encode(), _TEXT, close=True)
            return False
        self._get(target.split("?", 1)[0], headers, close=not keep)
        return keep

    def _refuse(self, status: int, why: str) -> bool:
        self._send(status, f"{why}\n".encode(), _TEXT, close=True)
        return False

    def _get(self, path: str, headers: dict[str, str], *, close: bool) -> None:
        if path == "/metrics":
            try:
                body, content_type = self.server.page(headers.get("accept", ""))
            except Exception as exc:  # a scrape must answer even if exposition broke
                log.exception("exposition failed error=%s", exc)
                self.server.exposition_error = f"{type(exc).__name__}: {exc}"
                self._send(500, b"exposition failed\n", _TEXT, close=close, vary=True)
                return
            self.server.exposition_error = ""
            if accepts_gzip(headers.get("accept-encoding", "")):
                # level 1: a 34 kB InfiniBand page shrinks to ~3 kB for ~0.03 ms of CPU
                body = gzip.compress(body, compresslevel=1, mtime=0)
                self._send(200, body, content_type, encoding="gzip", close=close, vary=True)
            else:
                self._send(200, body, content_type, close=close, vary=True)
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
            status = 503 if failing else 200
            self._send(status, json.dumps(health).encode(), "application/json", close=close)
        else:
            self._send(404, b"not found; try /metrics or /healthz\n", _TEXT, close=close)

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str,
        *,
        encoding: str = "",
        close: bool = False,
        vary: bool = False,
    ) -> None:
        date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())
        head = [
            f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}",
            "Server: gpuscope-agent",
            f"Date: {date}",
            f"Content-Type: {content_type}",
        ]
        if encoding:
            head.append(f"Content-Encoding: {encoding}")
        if vary:
            head.append("Vary: Accept-Encoding")
        head.append(f"Content-Length: {len(body)}")
        if close:
            head.append("Connection: close")
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)


class AgentHttpServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True  # as http.server's: a restarted agent binds its port at once

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

        from gpuscope.agent.serving.textformat import generate_text

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
