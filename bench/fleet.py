"""Benchmark: fleet mode, one analytics cycle against VictoriaMetrics holding a simulated fleet.

The demo's scenario on N nodes (8 GPUs each; default 1,250 nodes = 10,000 GPUs, quick 128
nodes = 1,024 GPUs), the agent's real page for every node every 60 s for 15 minutes pushed
with timestamps to a real single-node VictoriaMetrics (``bench/fleet_sim.py``). Then one
fleet-mode cycle in a fresh collector process (its own interpreter, so its RSS and CPU are
its own): every shard's questions for the newest closed 5-minute bucket, stored in DuckDB.
Reported: the cycle's wall time, the engine's time (HTTP round trips) and the engine
process's CPU, bytes answered, the collector's CPU and peak RSS (VmHWM), samples stored.
Figures are also given per 1,000 GPUs (docs/scale.md).

Run: .venv/bin/python bench/fleet.py [--quick] [--nodes N]  (or ``python -m bench --only
fleet``). Needs /usr/bin/victoria-metrics (scripts/install-test-servers).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench.figure import Figure, print_figures
from bench.fleet_catchup import start_victoria_metrics

STEP_S = 60
MINUTES = 15


def _cpu_of(pid: int) -> float:
    """CPU seconds (user + system) a process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cycle_main(url: str, db: str, bucket: float, now: float, shards: int, mode: str) -> None:
    """The child: one fleet cycle for ``bucket`` (or, in pull mode, one 15 s step at its
    start: what the pull path asks every 15 s), figures as one JSON line on stdout."""
    from gpuscope.collector.querying.query_ingest import QueryIngest
    from gpuscope.collector.storage.store import Store
    from gpuscope.core.malloc import limit_malloc_arenas
    from gpuscope.core.query_settings import QuerySettings

    limit_malloc_arenas()  # as `gpuscope collector` does at start
    q = QuerySettings(mode=mode, shards=shards, timeout_seconds=120, retries=0)  # type: ignore[arg-type]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    with Store.open(Path(db)) as store:
        ingest = QueryIngest(url, q, 15.0, store, store.append_scrape)
        for w in ingest.fleet.windows.values():
            w.cursor = bucket
        ingest.pull_window.cursor = bucket
        stored = ingest.cycle(bucket + 30 if mode == "pull" else now)
        last = ingest.last
        assert last is not None
    # VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over fork and execve, so a
    # child of the benchmark (which rendered the whole fleet's pages) would report the
    # parent's peak (694-715 MB in the first runs, against ~300 MB of its own)
    status = Path("/proc/self/status").read_text()
    hwm = int(status.split("VmHWM:")[1].split()[0]) / 1024
    print(json.dumps({
        "wall_s": time.perf_counter() - wall0, "cpu_s": time.process_time() - cpu0,
        "engine_s": last.stats.seconds, "bytes": last.stats.bytes,
        "queries": last.stats.queries, "samples": stored, "buckets": last.steps,
        "error": last.error, "rss_mb": hwm,
    }))  # fmt: skip


def measure(nodes: int, shards: int, modes: tuple[str, ...]) -> dict[str, dict[str, float]]:
    from bench.fleet_sim import FleetPages, push_to_victoriametrics
    from gpuscope.sim import SimulatedCluster
    from gpuscope.sim.scenario import default_scenario

    scenario = default_scenario(nodes)
    cluster = SimulatedCluster(scenario)
    end = math.floor((time.time() - 3600) / 300) * 300  # an hour back: past every offset
    start = end - MINUTES * 60
    pages = FleetPages(cluster, cluster.node_names, start - scenario.live_offset)
    tmp = Path(tempfile.mkdtemp(prefix="gpuscope-fleet-bench-"))
    vm, base = start_victoria_metrics(tmp)
    try:
        for _ in range(300):
            try:
                httpx.get(base + "/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        t0 = time.perf_counter()
        pushed = push_to_victoriametrics(
            base, pages, [start + k * STEP_S for k in range(MINUTES * 60 // STEP_S)]
        )
        httpx.get(base + "/internal/force_flush", timeout=120)
        load_s = time.perf_counter() - t0
        got: dict[str, dict[str, float]] = {}
        for mode in modes:
            engine_cpu0 = _cpu_of(vm.pid)
            child = subprocess.run(
                [sys.executable, __file__, "--cycle", base, str(tmp / f"{mode}.duckdb"),
                 str(end - 300), str(end + 120), str(shards), mode],
                check=False, capture_output=True, text=True, timeout=1200,
            )  # fmt: skip
            engine_cpu = _cpu_of(vm.pid) - engine_cpu0
            if child.returncode != 0:
                raise RuntimeError(child.stderr.strip().splitlines()[-1])
            out: dict[str, float] = json.loads(child.stdout.strip().splitlines()[-1])
            if out.get("error"):
                raise RuntimeError(str(out["error"]))
            out.update(engine_cpu_s=engine_cpu, pushed=pushed, load_s=load_s)
            got[mode] = out
        return got
    finally:
        vm.terminate()
        vm.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


def run(quick: bool = False, nodes: int | None = None) -> list[Figure]:
    nodes = nodes or (128 if quick else 1250)
    gpus = nodes * 8
    shards = max(1, math.ceil(nodes / 32))  # 256 GPUs a shard
    # pull mode only where one step of the whole fleet fits this machine's memory
    both = measure(nodes, shards, ("fleet", "pull") if gpus <= 2048 else ("fleet",))
    m = both["fleet"]
    per_k = 1000 / gpus
    what = f"fleet mode, {gpus:,} simulated GPUs in VictoriaMetrics, one cycle"
    notes = (
        f"{shards} node shards, {m['queries']:.0f} queries, one 5-minute bucket "
        f"({m['samples']:,.0f} samples stored); the engine holds {m['pushed']:,.0f} samples "
        f"(the agent's page of {nodes} nodes every {STEP_S} s for {MINUTES} min, loaded in "
        f"{m['load_s']:.0f} s); 2 cores shared with other work"
    )
    big = gpus >= 10_000
    figures = [
        Figure(f"{what}: wall time", m["wall_s"], "s", aim="well under 300 s", notes=notes,
               key=big),
        Figure(f"{what}: engine time (HTTP round trips)", m["engine_s"], "s"),
        Figure(f"{what}: engine CPU (VictoriaMetrics process)", m["engine_cpu_s"], "s"),
        Figure(f"{what}: bytes answered", m["bytes"] / 1e6, "MB"),
        Figure(f"{what}: collector CPU", m["cpu_s"], "s"),
        Figure(f"{what}: collector peak RSS", m["rss_mb"], "MB", aim="300 MB", key=big),
        Figure(f"{what}: engine time per 1,000 GPUs", m["engine_s"] * per_k, "s"),
        Figure(f"{what}: bytes per 1,000 GPUs", m["bytes"] / 1e6 * per_k, "MB"),
        Figure(f"{what}: collector CPU per 1,000 GPUs", m["cpu_s"] * per_k, "s"),
    ]  # fmt: skip
    if "pull" in both:
        p = both["pull"]
        pull = f"pull mode, {gpus:,} simulated GPUs in VictoriaMetrics, one 15 s step"
        figures += [
            Figure(f"{pull}: engine time per 1,000 GPUs", p["engine_s"] * per_k, "s",
                   notes=f"{p['samples']:,.0f} samples stored; every 15 s"),
            Figure(f"{pull}: bytes per 1,000 GPUs", p["bytes"] / 1e6 * per_k, "MB"),
            Figure(f"{pull}: collector CPU per 1,000 GPUs", p["cpu_s"] * per_k, "s"),
            Figure(f"{pull}: collector peak RSS", p["rss_mb"], "MB"),
        ]  # fmt: skip
    return figures


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--cycle":
        url, db, bucket, now, shards, mode = sys.argv[2:8]
        cycle_main(url, db, float(bucket), float(now), int(shards), mode)
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--nodes", type=int)
    args = p.parse_args()
    print_figures(run(args.quick, args.nodes))


if __name__ == "__main__":
    main()
