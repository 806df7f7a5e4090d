"""Processes and servers the integration tests start on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from tests import loopback
from tests.conftest import SHUTDOWN_POLL_S, free_port

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def wait_http(url: str, proc: subprocess.Popen[str] | None = None, timeout: float = 90) -> None:
    """Wait until ``url`` answers (a process that exits first raises at once). The deadline
    is generous: a cold start of the CLI on a loaded 2-core machine takes tens of seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            loopback.get(url, timeout=2)
            return
        except httpx.HTTPError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"process exited: {proc.communicate()[1]}") from None
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def installed(name: str, fallback: str = "") -> str:
    """The path of a server binary, or the test skipped when it is not installed (the Debian
    packages scripts/install-test-servers installs; ``fallback`` where the package puts it
    outside PATH)."""
    import shutil
    from pathlib import Path

    found = shutil.which(name) or (fallback if fallback and Path(fallback).exists() else None)
    if found is None:
        import pytest

        pytest.skip(f"{name} is not installed (scripts/install-test-servers installs it)")
    return found


def listening_pids(port: int) -> set[int] | None:
    """The processes holding a socket that listens on ``port`` (any local address, IPv4 or
    IPv6, from Linux's /proc); ``None`` where that cannot be told (no /proc, or no
    listening socket found there)."""
    tables = [Path("/proc/net/tcp"), Path("/proc/net/tcp6")]
    if not tables[0].exists():
        return None
    suffix = f":{port:04X}"
    inodes = {
        fields[9]
        for table in tables
        if table.exists()
        for fields in (line.split() for line in table.read_text().splitlines()[1:])
        if fields[1].endswith(suffix) and fields[3] == "0A"  # 0A: LISTEN
    }
    if not inodes:
        return None
    pids: set[int] = set()
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            link = os.readlink(fd)
        except OSError:
            continue  # gone, or not ours to read
        if link.startswith("socket:[") and link[8:-1] in inodes:
            pids.add(int(fd.parts[2]))
    return pids


@contextmanager
def served(argv: list[str], port: int, ready_path: str, stop_timeout: float = 30) -> Iterator[str]:
    """A server process listening on loopback ``port``: yields its base URL once
    ``ready_path`` answers (a process that exits first fails at once with its stderr), and
    stops it after."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + ready_path, proc)
        # an answer proves a server on the port, not that it is this one: a test must never
        # read another test's server (which fails later as wrong data, far from its cause)
        holders = listening_pids(port)
        if holders is not None and proc.pid not in holders:
            raise RuntimeError(f"{argv[0]}: port {port} is answered by another process")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=stop_timeout)


@contextmanager
def agent_process(
    node: str, *extra: str, host: str = "127.0.0.1", port: int | None = None
) -> Iterator[str]:
    """A real `gpuscope agent --gpu-source sim` on a loopback address; yields its URL."""
    port = port or free_port()
    args = ["agent", "--gpu-source", "sim", "--node", node, "--listen", f"{host}:{port}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuscope.cli.main", *args, *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    url = f"http://{host}:{port}/metrics"
    try:
        wait_http(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


Responder = Callable[[BaseHTTPRequestHandler], None]


@contextmanager
def http_server(respond: Responder) -> Iterator[str]:
    """A loopback HTTP server answering every GET and POST with ``respond``; yields its
    base URL."""

    class Handler(BaseHTTPRequestHandler):
        disable_nagle_algorithm = True  # the body is not held for the client's delayed ACK

        def do_GET(self) -> None:
            respond(self)

        def do_POST(self) -> None:
            respond(self)

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S}, daemon=True
    ).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def send(handler: BaseHTTPRequestHandler, body: bytes, ctype: str, status: int = 200) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", ctype)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@contextmanager
def prometheus_server(tmp: os.PathLike[str], scrape_urls: list[str]) -> Iterator[str]:
    """A real Prometheus (Debian package) scraping ``scrape_urls`` every second."""
    jobs = []
    for i, url in enumerate(scrape_urls):
        t = httpx.URL(url)
        jobs.append({
            "job_name": f"agent{i}", "scrape_interval": "1s", "metrics_path": t.path,
            "static_configs": [{"targets": [f"{t.host}:{t.port}"]}],
        })  # fmt: skip
    with prometheus_with(tmp, jobs) as base:
        yield base


@contextmanager
def prometheus_with(
    tmp: os.PathLike[str],
    scrape_configs: list[dict[str, Any]],
    rule_files: list[os.PathLike[str]] | None = None,
) -> Iterator[str]:
    """A real Prometheus (Debian package) with these scrape configurations (and recording
    or alerting rule files), evaluating and scraping every second; yields its base URL once
    it is ready."""
    from pathlib import Path

    import yaml

    binary = installed("prometheus")
    root = Path(tmp)
    cfg = root / "prometheus.yml"
    settings = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": scrape_configs,
        "rule_files": [str(f) for f in rule_files or []],
    }
    cfg.write_text(yaml.safe_dump(settings))
    port = free_port()
    argv = [
        binary,
        f"--config.file={cfg}",
        f"--storage.tsdb.path={root / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with served(argv, port, "/-/ready", stop_timeout=20) as base:
        yield base
