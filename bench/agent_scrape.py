"""Benchmark: one agent scrape of 8 GPUs and 8 InfiniBand ports, beside node_exporter.

Measures, on one generated mlx5-shaped sysfs tree:
- in process: time of one collection (all sources read) and of one exposition (collection
  plus text format), and CPU per scrape for the InfiniBand part alone;
- as real processes answering HTTP scrapes: CPU per scrape (from /proc/<pid>/stat) and
  resident memory of `gpuscope agent` and of node_exporter's infiniband collector
  (Debian package prometheus-node-exporter; skipped if absent).

The GPUs come from the simulated source: on a real node NVML calls add their own cost.
Run: .venv/bin/python bench/agent_scrape.py [--quick]  (or `python -m bench --only agent_scrape`)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from prometheus_client.registry import CollectorRegistry

from agent.textformat import generate_text as generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.exposition import AgentCollector
from agent.infiniband import SysfsIbSource
from agent.sim import SimAttributor, SimGpuSource, scenario_clock
from bench.figure import Figure, Reference, print_figures
from bench.machine import tool_version
from bench.sysfs_tree import write_tree
from gpuscope.sim import SimulatedCluster, default_scenario

TICK = os.sysconf("SC_CLK_TCK")
NODE = "gpu-node-30"  # busy node: 8 GPUs, fractional pods sharing some


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def in_process(tree: Path, scrapes: int) -> dict[str, float]:
    cluster = SimulatedCluster(default_scenario())
    clock = scenario_clock(cluster.scenario)
    full = AgentCollector(
        NODE,
        SimGpuSource(cluster, NODE, clock),
        SysfsIbSource(tree),
        SimAttributor(cluster, NODE, clock),
    )
    reg = CollectorRegistry(auto_describe=False)
    reg.register(full)
    ib_only = AgentCollector(NODE, None, SysfsIbSource(tree), None)
    ib_reg = CollectorRegistry(auto_describe=False)
    ib_reg.register(ib_only)
    series = sum(
        1 for line in generate_latest(reg).decode().splitlines() if line and line[0] != "#"
    )
    collect, expose = [], []
    for _ in range(scrapes):
        t0 = time.perf_counter()
        full.read()
        t1 = time.perf_counter()
        generate_latest(reg)
        t2 = time.perf_counter()
        collect.append(t1 - t0)
        expose.append(t2 - t1)
    c0 = time.process_time()
    for _ in range(scrapes):
        generate_latest(reg)
    full_cpu = (time.process_time() - c0) / scrapes
    c0 = time.process_time()
    for _ in range(scrapes):
        generate_latest(ib_reg)
    ib_cpu = (time.process_time() - c0) / scrapes
    ib_source = SysfsIbSource(tree)
    c0 = time.process_time()
    for _ in range(scrapes):
        ib_source.read()
    ib_read_cpu = (time.process_time() - c0) / scrapes
    full.close()
    ib_only.close()
    return {
        "series": series,
        "collect_ms_median": statistics.median(collect) * 1e3,
        "scrape_ms_median": statistics.median(c + e for c, e in zip(collect, expose, strict=True))
        * 1e3,
        "scrape_cpu_ms": full_cpu * 1e3,
        "ib_scrape_cpu_ms": ib_cpu * 1e3,
        "ib_read_cpu_ms": ib_read_cpu * 1e3,
    }


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def over_http(cmd: list[str], port: int, scrapes: int) -> dict[str, float]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        with httpx.Client(timeout=10) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    client.get(url).raise_for_status()
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError(f"{cmd[0]} did not start") from None
                    time.sleep(0.1)
            for _ in range(20):  # warm up
                client.get(url)
            c0 = cpu_seconds(proc.pid)
            t0 = time.perf_counter()
            for _ in range(scrapes):
                body = client.get(url).text
            wall = (time.perf_counter() - t0) / scrapes
            cpu = (cpu_seconds(proc.pid) - c0) / scrapes
            series = sum(1 for line in body.splitlines() if line and line[0] != "#")
            return {
                "cpu_ms_per_scrape": cpu * 1e3,
                "wall_ms_per_scrape": wall * 1e3,
                "rss_mib": rss_mib(proc.pid),
                "series": series,
            }
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def serve_ib_only(tree: str, port: int) -> None:
    """An agent process with the InfiniBand source alone (for the like-for-like comparison)."""
    import threading

    from agent.server import AgentHttpServer

    collector = AgentCollector(NODE, None, SysfsIbSource(Path(tree)), None)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    AgentHttpServer(("127.0.0.1", port), registry, collector).start_in_thread()
    threading.Event().wait()


def agent_cmd(tree: Path, port: int) -> list[str]:
    return [
        sys.executable, "-m", "gpuscope.cli", "agent", "--gpu-source", "sim", "--node", NODE,
        "--sysfs-root", str(tree), "--listen", f"127.0.0.1:{port}", "--log-level", "WARNING",
    ]  # fmt: skip


def node_exporter_cmd(exporter: str, tree: Path, port: int) -> list[str]:
    return [
        exporter,
        "--collector.disable-defaults",
        "--collector.infiniband",
        f"--path.sysfs={tree}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]


def run(quick: bool = False, scrapes: int | None = None) -> list[Figure]:
    """The agent's scrape cost beside node_exporter's (quick: 50 scrapes instead of 500)."""
    n = scrapes or (50 if quick else 500)
    exporter = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    with tempfile.TemporaryDirectory() as tmp:
        tree = write_tree(Path(tmp) / "sys")
        inproc = in_process(tree, n)
        ours = over_http(agent_cmd(tree, port := free_port()), port, n)
        port = free_port()
        ib = over_http([sys.executable, __file__, "--serve-ib-only", str(tree), str(port)], port, n)
        ne = None
        if exporter is not None:
            port = free_port()
            ne = over_http(node_exporter_cmd(exporter, tree, port), port, n)
    label = f"node_exporter {tool_version('prometheus-node-exporter', 'node_exporter')}"

    def ref(key: str, unit: str) -> Reference:
        if ne is None:
            return Reference.not_installed("node_exporter")
        return Reference(f"{label}, infiniband collector, {ne['series']:.0f} series", ne[key], unit)

    where = f"{n} scrapes, 8 GPUs + 8 IB ports + workloads"
    return [
        Figure(
            "full scrape, agent process over HTTP",
            ours["cpu_ms_per_scrape"],
            "ms CPU",
            aim="< 5 ms CPU",
            notes=f"{where}, {ours['series']:.0f} series",
            key=True,
        ),
        Figure("same, wall time", ours["wall_ms_per_scrape"], "ms"),
        Figure(
            "same, in process: collection (all sources), median", inproc["collect_ms_median"], "ms"
        ),
        Figure("same, in process: collection + exposition", inproc["scrape_cpu_ms"], "ms CPU"),
        Figure(
            "InfiniBand only, agent process over HTTP",
            ib["cpu_ms_per_scrape"],
            "ms CPU",
            aim="no slower than node_exporter",
            reference=ref("cpu_ms_per_scrape", "ms CPU"),
            notes=f"{ib['series']:.0f} series",
            key=True,
        ),
        Figure("InfiniBand sysfs read alone, 8 ports", inproc["ib_read_cpu_ms"], "ms CPU"),
        Figure(
            "agent resident memory (`gpuscope agent --gpu-source sim`)",
            ours["rss_mib"],
            "MiB",
            reference=ref("rss_mib", "MiB"),
        ),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--scrapes", type=int, default=None)
    ap.add_argument("--serve-ib-only", nargs=2, metavar=("TREE", "PORT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_ib_only:
        serve_ib_only(args.serve_ib_only[0], int(args.serve_ib_only[1]))
        return
    print_figures(run(args.quick, args.scrapes))


if __name__ == "__main__":
    main()
