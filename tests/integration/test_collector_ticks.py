"""Every tick of every target is accounted for in the running collector's status, with two
busy loops taking the CPU beside it: each tick is a scrape (up or failed) or a skip, never
silently lost. The identity is checked, not a rate, so a slow machine cannot fail it."""

import math
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.integration.helpers import agent_process, http_server, send
from tests.integration.test_collector import start_collector, status

pytestmark = pytest.mark.integration


@contextmanager
def busy_loops(n: int) -> Iterator[None]:
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def accounted(target: dict[str, Any], interval: float) -> tuple[int, int]:
    """(ticks between the first and the latest scrape, scrapes + skipped)."""
    # the first scrape comes at once (on a whole second), the later ones on multiples of
    # the interval
    first, last = target["first_tick"], target["last_tick"]
    ticks = 1 + round(last / interval) - math.floor(first / interval + 1e-9)
    return ticks, target["scrapes"] + target["skipped"]


def test_status_accounts_for_every_tick_under_cpu_pressure(tmp_path: Path) -> None:
    calls = {"n": 0}

    def sometimes_slow(h: BaseHTTPRequestHandler) -> None:
        calls["n"] += 1
        if calls["n"] % 3 == 0:
            time.sleep(2.5)  # past the scrape timeout and past the next two ticks
        send(h, b"# TYPE m_ratio gauge\nm_ratio 0.5\n", "text/plain; version=0.0.4")

    with (
        agent_process("gpu-node-08") as agent,
        http_server(sometimes_slow) as slow,
        busy_loops(2),
    ):
        proc, base = start_collector(tmp_path / "g.duckdb", [agent, slow + "/metrics"])
        try:
            deadline = time.monotonic() + 240
            while True:
                targets = status(base)["targets"]
                if len(targets) == 2 and all(t["scrapes"] + t["skipped"] >= 12 for t in targets):
                    break
                assert time.monotonic() < deadline, f"too few ticks: {targets}"
                time.sleep(0.5)
        finally:
            proc.terminate()
            proc.wait(30)
    by_url = {t["url"]: t for t in targets}
    for target in targets:
        ticks, seen = accounted(target, 1.0)
        assert seen == ticks, target
    slow_one = by_url[slow + "/metrics"]
    assert slow_one["failures_by_reason"].get("timeout", 0) >= 1
