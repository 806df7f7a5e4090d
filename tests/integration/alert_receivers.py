"""A local HTTP receiver for the alerts tests: records every POST, answers from a script."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.conftest import SHUTDOWN_POLL_S


@dataclass
class Reply:
    status: int = 200
    body: bytes = b"ok"
    headers: dict[str, str] = field(default_factory=dict)
    #: Seconds to wait before answering (a receiver that hangs).
    delay: float = 0.0


@dataclass
class Receiver:
    url: str
    #: Replies in order; the last one repeats.
    script: list[Reply] = field(default_factory=lambda: [Reply()])
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bodies(self) -> list[Any]:
        with self.lock:
            return [r["json"] for r in self.requests]


@contextmanager
def receiver(*script: Reply) -> Iterator[Receiver]:
    """A loopback server recording POSTs (path, headers, JSON body)."""
    state = Receiver(url="", script=list(script) or [Reply()])

    class Handler(BaseHTTPRequestHandler):
        disable_nagle_algorithm = True  # the body is not held for the client's delayed ACK

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            raw = self.rfile.read(length)
            with state.lock:
                n = len(state.requests)
                state.requests.append(
                    {
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "json": json.loads(raw) if raw else None,
                    }
                )
                reply = state.script[min(n, len(state.script) - 1)]
            if reply.delay:
                time.sleep(reply.delay)
            try:
                self.send_response(reply.status)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S}, daemon=True
    ).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


class FakeTime:
    """A clock that only moves when something sleeps: retries and rate limits cost nothing."""

    def __init__(self, start: float = 1_780_000_000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def clock(self) -> float:
        with self._lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self.now += seconds


@contextmanager
def alertmanager_server(tmp: Any, webhook_url: str) -> Iterator[str]:
    """A real Alertmanager (Debian package) on loopback forwarding every alert to
    ``webhook_url`` at once (group_wait 0s), resolved ones included; yields its base URL."""
    import shutil
    import subprocess
    from pathlib import Path

    import pytest

    from tests.conftest import free_port
    from tests.integration.helpers import wait_http

    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip("alertmanager is not installed (scripts/install-test-servers installs it)")
    root = Path(tmp)
    cfg = root / "alertmanager.yml"
    cfg.write_text(
        "route:\n  receiver: hook\n  group_by: [alertname, namespace]\n"
        "  group_wait: 0s\n  group_interval: 1s\n  repeat_interval: 1h\n"
        f"receivers:\n  - name: hook\n    webhook_configs:\n"
        f"      - {{url: '{webhook_url}', send_resolved: true}}\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [binary, f"--config.file={cfg}", f"--storage.path={root / 'am-data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + "/-/ready", proc)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.1)
