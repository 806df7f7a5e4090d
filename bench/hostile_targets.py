"""Benchmark: a healthy agent beside hostile targets; does its data keep flowing?

For each case, a real collector process (``gpuscope collector``, 1 s interval) scrapes a
real ``gpuscope agent --gpu-source sim`` and one hostile target served over HTTP on
loopback: a sample stamped 2^62 ms, a body that never finishes, labels that change every
scrape, a gzip bomb, a page of a million series, NaN counters, a ``# TYPE`` line that
would turn the agent's gauges into counters. Then four of the worst at once. Reported per
case: the healthy agent's scrapes in the window (aim: one per interval) and the
collector's peak RSS (VmHWM; aim: under 400 MB with four hostile targets).

Run: .venv/bin/python bench/hostile_targets.py [--quick]  (or ``python -m bench --only
hostile_targets``). The hostile servers are shared with tests/integration.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench.figure import Figure, print_figures
from bench.processes import free_port, process

TEXT = "text/plain; version=0.0.4; charset=utf-8"
Respond = Callable[[BaseHTTPRequestHandler], None]


def _send(h: BaseHTTPRequestHandler, body: bytes, *, encoding: str = "") -> None:
    h.send_response(200)
    h.send_header("Content-Type", TEXT)
    if encoding:
        h.send_header("Content-Encoding", encoding)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def _gzip_bomb(inflated_mb: int) -> bytes:
    """A gzip stream of ``inflated_mb`` MB of one byte repeated (about 1,000:1)."""
    out = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b"0" * 2**20
    parts = [out.compress(chunk) for _ in range(inflated_mb)]
    return b"".join([*parts, out.flush()])


def responder(case: str, *, quick: bool = False, stop: threading.Event | None = None) -> Respond:
    """The handler of one hostile case (see the module docstring for the cases)."""
    stop = stop or threading.Event()
    scrapes = [0]
    if case == "timestamp_2_62":
        page = f"evil_value_ratio 0.5 {2**62}\nevil_ok_ratio 1\n".encode()
        return lambda h: _send(h, page)
    if case == "never_finishing_body":

        def hang(h: BaseHTTPRequestHandler) -> None:
            h.send_response(200)
            h.send_header("Content-Type", TEXT)
            h.send_header("Content-Length", "100000000")
            h.end_headers()
            h.wfile.write(b"evil_ratio 1\n")
            h.wfile.flush()
            stop.wait(120)

        return hang
    if case == "churning_labels":
        width = 2_000 if quick else 20_000

        def churn(h: BaseHTTPRequestHandler) -> None:
            scrapes[0] += 1
            n = scrapes[0]
            _send(h, "".join(f'evil_ratio{{id="{n}-{i}"}} 1\n' for i in range(width)).encode())

        return churn
    if case == "gzip_bomb":
        bomb = _gzip_bomb(64 if quick else 1024)
        return lambda h: _send(h, bomb, encoding="gzip")
    if case == "million_series_page":
        n = 100_000 if quick else 1_000_000
        big = "".join(f'evil_ratio{{i="{i}"}} 1\n' for i in range(n)).encode()
        return lambda h: _send(h, big)
    if case == "nan_counters":

        def nan(h: BaseHTTPRequestHandler) -> None:
            scrapes[0] += 1
            value = "NaN" if scrapes[0] % 2 else str(1e12 + scrapes[0])
            page = f"# TYPE evil_bytes_total counter\nevil_bytes_total {value}\n"
            gauge = 'gpuscope_gpu_utilization_ratio{gpu="0",node="nan-node",uuid="GPU-NAN"} NaN\n'
            _send(h, (page + gauge).encode())

        return nan
    if case == "type_poisoning":
        page = (
            b"# TYPE gpuscope_gpu_utilization_ratio counter\n"
            b"# TYPE gpuscope_gpu_temperature_celsius counter\n"
            b'gpuscope_gpu_utilization_ratio{gpu="0"} 5\n'
            b'gpuscope_gpu_temperature_celsius{gpu="0"} 70\n'
        )
        return lambda h: _send(h, page)
    raise ValueError(f"unknown hostile case {case!r}")


CASES = (
    "timestamp_2_62",
    "never_finishing_body",
    "churning_labels",
    "gzip_bomb",
    "million_series_page",
    "nan_counters",
    "type_poisoning",
)
#: The four served at once for the memory aim.
WORST = ("gzip_bomb", "million_series_page", "churning_labels", "never_finishing_body")


@contextmanager
def serve(respond: Respond) -> Iterator[str]:
    """A loopback HTTP server answering every GET with ``respond``; yields its /metrics."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with contextlib.suppress(OSError):  # the collector hung up (timeout, size limit)
                respond(self)

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def gpuscope(args: list[str], health: str) -> Iterator[subprocess.Popen[bytes]]:
    """``gpuscope ARGS`` as its own process (bench/processes.py), once ``health`` answers."""
    with process([sys.executable, "-m", "gpuscope.cli.main", *args], health) as proc:
        yield proc


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(cases: tuple[str, ...], seconds: float, quick: bool) -> tuple[int, float]:
    """(healthy agent's scrapes in ``seconds``, collector's peak RSS in MB)."""
    stop = threading.Event()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        agent_port, port = free_port(), free_port()
        agent = f"http://127.0.0.1:{agent_port}/metrics"
        stack.enter_context(
            gpuscope(
                ["agent", "--gpu-source", "sim", "--node", "gpu-node-08", "--listen",
                 f"127.0.0.1:{agent_port}"],
                agent,
            )
        )  # fmt: skip
        hostile = [stack.enter_context(serve(responder(c, quick=quick, stop=stop))) for c in cases]
        args = ["collector", "--db", str(Path(tmp) / "c.duckdb"), "--listen",
                f"127.0.0.1:{port}", "--scrape-interval", "1", "--kubernetes", "none"]  # fmt: skip
        for url in [agent, *hostile]:
            args += ["--target", url]
        base = f"http://127.0.0.1:{port}"
        try:
            collector = stack.enter_context(gpuscope(args, base + "/healthz"))

            def healthy_scrapes() -> int:
                targets = httpx.get(base + "/api/v1/status", timeout=30).json()["targets"]
                return int(next(t["scrapes"] for t in targets if t["url"] == agent))

            deadline = time.monotonic() + 30
            while healthy_scrapes() < 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            before = healthy_scrapes()
            time.sleep(seconds)
            scrapes = healthy_scrapes() - before
            return scrapes, peak_rss_mb(collector.pid)
        finally:
            stop.set()


def run(quick: bool = False) -> list[Figure]:
    seconds = 5.0 if quick else 30.0
    figures: list[Figure] = []
    aim = f"{seconds:.0f} (one per 1 s interval)"
    for case, cases in [*((c, (c,)) for c in CASES), ("four at once", WORST)]:
        scrapes, rss = measure(cases, seconds, quick)
        figures.append(
            Figure(f"{case}: healthy agent scrapes in {seconds:.0f} s", scrapes, "scrapes",
                   aim=aim, key=True)
        )  # fmt: skip
        figures.append(
            Figure(f"{case}: collector peak RSS", round(rss, 1), "MB",
                   aim="< 400 MB" if case == "four at once" else None,
                   key=case == "four at once")
        )  # fmt: skip
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    print_figures(run(ap.parse_args().quick))


if __name__ == "__main__":
    main()
