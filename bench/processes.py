"""Server processes a benchmark starts on loopback: a free port, wait until ready, stop.

Shared by the benchmarks that run what users run as separate processes (bench/hostile_targets.py,
bench/collector_process.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    """Wait until ``url`` answers 2xx (Prometheus's /-/ready is 503 while it starts); a
    process that exits first, or the deadline, raises."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx.get(url, timeout=2).raise_for_status()
            return
        except httpx.HTTPError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not come up") from None
            time.sleep(0.2)


@contextmanager
def process(cmd: list[str], ready_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """``cmd`` running until the block ends, once ``ready_url`` answers."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    try:
        wait_http(ready_url, proc)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
