"""Benchmark: CPU isolation between targets on a starved CPU (issue 38).

Eight ``gpuscope agent --gpu-source sim`` processes and one target whose page brings 20,000
new label sets a scrape, one ``gpuscope collector`` at a 2 s interval. The collector runs at
a chosen niceness on one core beside busy loops at nice 0 pinned to the same core (the
agents and the hostile server on the other cores), so its CPU share is known rather than
left to the machine's load: at nice 10 beside one busy loop it gets about a tenth of the
core (CFS weights 110 against 1024). Reported: the healthy targets' ticks that ended in a
stored scrape, out of every tick of their schedules in the window (from /api/v1/status:
scrapes, failures and skipped ticks), with the failures by reason and the hostile target's
skipped ticks.

Run: .venv/bin/python bench/starved_isolation.py [--seconds 180] [--nice 10] [--busy 1]
[--no-hostile] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench.hostile_targets import responder, serve
from bench.processes import ENV, free_port, wait_http

HEALTHY = 8
BUSY = "while True: pass"


@contextmanager
def started(cmd: list[str], ready: str | None = None) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    try:
        if ready is not None:
            wait_http(ready, proc, timeout=180)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _status(base: str) -> dict[str, dict[str, Any]]:
    targets = httpx.get(base + "/api/v1/status", timeout=60).json()["targets"]
    return {t["url"]: t for t in targets}


def run_once(
    seconds: float, nice: int, busy: int, hostile: bool, interval: float
) -> dict[str, Any]:
    cores = sorted(os.sched_getaffinity(0))
    collector_core = str(cores[0])
    others = ",".join(map(str, cores[1:] or cores[:1]))
    os.sched_setaffinity(0, {int(c) for c in others.split(",")})
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        agents = []
        for i in range(HEALTHY):
            port = free_port()
            url = f"http://127.0.0.1:{port}/metrics"
            stack.enter_context(
                started(["taskset", "-c", others, "nice", "-n", str(nice), py, "-m",
                         "gpuscope.cli.main", "agent", "--gpu-source", "sim", "--node",
                         f"gpu-node-{i:02d}", "--listen", f"127.0.0.1:{port}"], url)
            )  # fmt: skip
            agents.append(url)
        targets = list(agents)
        if hostile:
            targets.append(stack.enter_context(serve(responder("churning_labels"))))
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        args = ["taskset", "-c", collector_core, "nice", "-n", str(nice), py, "-m",
                "gpuscope.cli.main", "collector", "--db", str(Path(tmp) / "c.duckdb"),
                "--listen", f"127.0.0.1:{port}", "--scrape-interval", f"{interval:g}",
                "--kubernetes", "none", "--log-level", "WARNING"]  # fmt: skip
        for url in targets:
            args += ["--target", url]
        collector = stack.enter_context(started(args, base + "/healthz"))
        for _ in range(busy):  # once the collector is up: its start is not what is measured
            stack.enter_context(started(["taskset", "-c", collector_core, py, "-c", BUSY]))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # every target scraped once: the window opens
            st = _status(base)
            if all(st.get(u, {}).get("scrapes", 0) >= 1 for u in targets):
                break
            time.sleep(1)
        before = _status(base)
        cpu0 = _cpu(collector.pid)
        time.sleep(seconds)
        after = _status(base)
        cpu1 = _cpu(collector.pid)
    ok = ticks = 0
    reasons: dict[str, int] = {}
    for url in agents:
        a, b = before[url], after[url]
        ok += (b["scrapes"] - b["failures"]) - (a["scrapes"] - a["failures"])
        ticks += (b["scrapes"] + b["skipped"]) - (a["scrapes"] + a["skipped"])
        for why, n in b["failures_by_reason"].items():
            reasons[why] = reasons.get(why, 0) + n - a["failures_by_reason"].get(why, 0)
    out: dict[str, Any] = {
        "nice": nice, "busy_loops": busy, "hostile": hostile, "seconds": seconds,
        "healthy_ok_ticks": ok, "healthy_ticks": ticks,
        "healthy_fraction": round(ok / ticks, 4) if ticks else None,
        "healthy_failures": {k: v for k, v in reasons.items() if v},
        "collector_cpu_seconds": round(cpu1 - cpu0, 2),
    }  # fmt: skip
    if hostile:
        h0, h1 = before[targets[-1]], after[targets[-1]]
        out["hostile_scrapes"] = h1["scrapes"] - h0["scrapes"]
        out["hostile_skipped"] = h1["skipped"] - h0["skipped"]
    return out


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--busy", type=int, default=1)
    ap.add_argument("--no-hostile", action="store_true")
    ap.add_argument("--runs", type=int, default=1)
    a = ap.parse_args()
    for _ in range(a.runs):
        result = run_once(a.seconds, a.nice, a.busy, not a.no_hostile, a.interval)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
