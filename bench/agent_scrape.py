"""Benchmark: the agent's scrape cost as a user pays it, beside node_exporter, same run.

What a user runs: ``gpuscope agent --gpu-source sim`` as its own process (one simulated
node, 8 GPUs with fractional pods, plus a generated 8-port mlx5 sysfs tree, the same tree
node_exporter reads), scraped over HTTP on loopback with the headers Prometheus sends
(OpenMetrics preferred, gzip accepted). Scrapes alternate between the processes, one
scrape each in turn: the full agent, an agent process with the InfiniBand source alone (the
like-for-like peer of node_exporter's infiniband collector), and node_exporter
(``--collector.disable-defaults --collector.infiniband``; Debian package
prometheus-node-exporter, skipped if absent). CPU per scrape is the serving process's own
CPU time (user + system, every thread) across that one scrape, read from the kernel's
per-process CPU clock (``clock_getcpuclockid``: what ``/proc/<pid>/stat`` counts, at
nanosecond resolution); min, median and p99 over the scrapes. Resident memory is VmRSS
after the scrapes. Nothing is measured in this process.

The GPUs come from the simulated source: on a real node NVML calls add their own cost.
``--baseline DIR`` also runs ``gpuscope agent`` from another checkout (e.g. the commit
before a change) in the same rotation, for a before/after on the same loaded machine.
Run: .venv/bin/python bench/agent_scrape.py [--quick]  (or `python -m bench --only agent_scrape`)
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.figure import Figure, Reference, print_figures
from bench.machine import tool_version
from bench.sysfs_tree import write_tree

NODE = "gpu-node-30"  # busy node: 8 GPUs, fractional pods sharing some
#: What Prometheus 3 sends when it scrapes (it prefers OpenMetrics, and takes gzip).
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
HEADERS = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}


def cpu_clock_seconds(pid: int) -> float:
    """User + system CPU time of every thread of ``pid``, live ones and finished ones, from
    the kernel's process CPU clock (``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)``)."""
    return time.clock_gettime_ns(((~pid) << 3) | 2) / 1e9


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    """One serving process under measurement, and what its scrapes cost."""

    label: str
    cmd: list[str]
    env: dict[str, str] | None = None
    cwd: Path | None = None
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    cpu_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    series: int = 0
    body_bytes: int = 0
    #: bytes on the wire (gzip when the server honours Prometheus' Accept-Encoding)
    wire_bytes: int = 0
    rss: float = float("nan")
    #: Seconds from the process's start to its first answer on /metrics (polled every
    #: 10 ms), and the CPU time it spent until then.
    startup_s: float = float("nan")
    startup_cpu_s: float = float("nan")

    def scrape(self, client: httpx.Client) -> None:
        assert self.proc is not None
        c0 = cpu_clock_seconds(self.proc.pid)
        t0 = time.perf_counter()
        r = client.get(f"http://127.0.0.1:{self.port}/metrics", headers=HEADERS)
        t1 = time.perf_counter()
        c1 = cpu_clock_seconds(self.proc.pid)
        r.raise_for_status()
        self.cpu_ms.append((c1 - c0) * 1e3)
        self.wall_ms.append((t1 - t0) * 1e3)
        self.body_bytes = len(r.content)
        self.wire_bytes = r.num_bytes_downloaded
        self.series = sum(1 for x in r.text.splitlines() if x and x[0] != "#")


def start(served: Served, client: httpx.Client) -> None:
    t0 = time.perf_counter()
    served.proc = subprocess.Popen(
        served.cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=served.env,
        cwd=served.cwd,
    )
    url = f"http://127.0.0.1:{served.port}/metrics"
    deadline = time.monotonic() + 60
    while True:
        try:
            client.get(url).raise_for_status()
            served.startup_s = time.perf_counter() - t0
            served.startup_cpu_s = cpu_clock_seconds(served.proc.pid)
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline or served.proc.poll() is not None:
                raise RuntimeError(f"{served.label} did not start: {served.cmd}") from None
            time.sleep(0.01)


def stop(served: Served) -> None:
    if served.proc is not None and served.proc.poll() is None:
        served.proc.terminate()
        served.proc.wait(timeout=10)


#: Commands are written with ``{port}``, filled in with a free port when they start.
def agent_cmd(tree: Path) -> list[str]:
    """``gpuscope agent`` as the console script runs it (``python -m gpuscope.cli`` is the
    same entry point: the agent is dispatched before the rest of the command line)."""
    return [
        sys.executable, "-m", "gpuscope.cli", "agent", "--gpu-source", "sim", "--node", NODE,
        "--sysfs-root", str(tree), "--listen", "127.0.0.1:{port}", "--log-level", "WARNING",
    ]  # fmt: skip


def node_exporter_cmd(exporter: str, tree: Path) -> list[str]:
    return [
        exporter,
        "--collector.disable-defaults",
        "--collector.infiniband",
        f"--path.sysfs={tree}",
        "--web.listen-address=127.0.0.1:{port}",
    ]


def serve_ib_only(tree: str, port: int) -> None:
    """An agent process with the InfiniBand source alone, served as `gpuscope agent`
    serves (the like-for-like peer of node_exporter's infiniband collector)."""
    from gpuscope.agent.devices.infiniband import SysfsIbSource
    from gpuscope.agent.serving.exposition import AgentCollector
    from gpuscope.agent.serving.server import AgentHttpServer

    collector = AgentCollector(NODE, None, SysfsIbSource(Path(tree)), None)
    AgentHttpServer(("127.0.0.1", port), None, collector).start_in_thread()
    threading.Event().wait()


def measure(processes: Sequence[Served], scrapes: int, warmup: int = 20) -> None:
    """Start every process, then scrape them in turn, one scrape each, ``scrapes`` rounds."""
    with httpx.Client(timeout=30) as client, ExitStack() as stack:
        for p in processes:
            p.port = free_port()
            p.cmd = [c.replace("{port}", str(p.port)) for c in p.cmd]
            stack.callback(stop, p)
            start(p, client)
        for _ in range(warmup):
            for p in processes:
                p.scrape(client)
        for p in processes:
            p.cpu_ms.clear()
            p.wall_ms.clear()
        for _ in range(scrapes):
            for p in processes:
                p.scrape(client)
        for p in processes:
            assert p.proc is not None
            p.rss = rss_mib(p.proc.pid)


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """min, median and p99 (nearest rank)."""
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, max(0, round(0.99 * len(ordered)) - 1))]
    return ordered[0], statistics.median(ordered), p99


def spread_text(values: Sequence[float], unit: str = "ms") -> str:
    lo, mid, hi = spread(values)
    return f"min {lo:.2f} / median {mid:.2f} / p99 {hi:.2f} {unit}"


def run(
    quick: bool = False, scrapes: int | None = None, baseline: Path | None = None
) -> list[Figure]:
    """The agent's scrape cost beside node_exporter's (quick: 50 rounds instead of 500)."""
    n = scrapes or (50 if quick else 500)
    exporter = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    with tempfile.TemporaryDirectory() as tmp:
        tree = write_tree(Path(tmp) / "sys")
        full = Served("agent", agent_cmd(tree))
        ib = Served(
            "agent, InfiniBand only",
            [sys.executable, str(Path(__file__).resolve()), "--serve-ib-only", str(tree), "{port}"],
        )
        processes = [full, ib]
        ne = None
        if exporter is not None:
            ne = Served("node_exporter", node_exporter_cmd(exporter, tree))
            processes.append(ne)
        before = None
        if baseline is not None:
            before = Served(
                "agent (baseline)",
                agent_cmd(tree),
                env={**os.environ, "PYTHONPATH": str(baseline.resolve())},
                cwd=baseline.resolve(),  # `python -m` puts the working directory first
            )
            processes.append(before)
        measure(processes, n)
    label = f"node_exporter {tool_version('prometheus-node-exporter', 'node_exporter')}"

    def ref(pick: str, unit: str) -> Reference:
        if ne is None:
            return Reference.not_installed("node_exporter")
        value = {"cpu": statistics.median(ne.cpu_ms) if ne.cpu_ms else 0.0, "rss": ne.rss,
                 "startup": ne.startup_s}[pick]  # fmt: skip
        return Reference(f"{label}, infiniband collector, {ne.series} series", value, unit)

    where = f"{n} scrapes each, alternating, over HTTP as Prometheus asks"
    figures = [
        Figure(
            "full scrape, `gpuscope agent` process over HTTP, median",
            statistics.median(full.cpu_ms),
            "ms CPU",
            aim="≤ 5 ms CPU",
            notes=f"{where}; 8 GPUs + 8 IB ports + workloads, {full.series} series, "
            f"{full.body_bytes:,} B; {spread_text(full.cpu_ms, 'ms CPU')}",
            key=True,
        ),
        Figure(
            "same, wall time, median",
            statistics.median(full.wall_ms),
            "ms",
            notes=spread_text(full.wall_ms),
        ),
        Figure(
            "InfiniBand only, agent process over HTTP, median",
            statistics.median(ib.cpu_ms),
            "ms CPU",
            aim="no slower than node_exporter",
            reference=ref("cpu", "ms CPU"),
            notes=f"{ib.series} series; agent {spread_text(ib.cpu_ms, 'ms CPU')}"
            + (f"; node_exporter {spread_text(ne.cpu_ms, 'ms CPU')}" if ne else ""),
            key=True,
        ),
        Figure(
            "InfiniBand only, bytes a scrape on the wire (gzip, as Prometheus asks)",
            float(ib.wire_bytes),
            "B",
            aim="≤ 2x node_exporter's",
            reference=(
                Reference(f"{label}, same tree, gzip", float(ne.wire_bytes), "B")
                if ne is not None
                else Reference.not_installed("node_exporter")
            ),
            notes=f"uncompressed {ib.body_bytes:,} B"
            + (f" (node_exporter {ne.body_bytes:,} B)" if ne else ""),
        ),
        Figure(
            "agent resident memory (`gpuscope agent --gpu-source sim`)",
            full.rss,
            "MiB",
            aim="≤ 25 MiB",
            reference=ref("rss", "MiB"),
            notes=f"VmRSS after {n + 20} scrapes",
            key=True,
        ),
        Figure(
            "agent start-up, process start to its first /metrics answer",
            full.startup_s,
            "s",
            aim="≤ 0.3 s",
            reference=ref("startup", "s"),
            notes=f"one start, polled every 10 ms; {full.startup_cpu_s:.2f} s CPU by then",
            key=True,
        ),
    ]
    if before is not None:
        figures.append(
            Figure(
                "baseline agent (--baseline), full scrape, median",
                statistics.median(before.cpu_ms),
                "ms CPU",
                notes=f"{spread_text(before.cpu_ms, 'ms CPU')}; VmRSS {before.rss:.1f} MiB",
            )
        )
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="50 rounds of scrapes instead of 500")
    ap.add_argument("--scrapes", type=int, default=None, help="rounds of scrapes")
    ap.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="also run `gpuscope agent` from this checkout, in the same rotation",
    )
    ap.add_argument("--serve-ib-only", nargs=2, metavar=("TREE", "PORT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_ib_only:
        serve_ib_only(args.serve_ib_only[0], int(args.serve_ib_only[1]))
        return
    print_figures(run(args.quick, args.scrapes, args.baseline))


if __name__ == "__main__":
    main()
