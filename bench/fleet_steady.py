"""Benchmark: fleet summaries' steady cycles, one 5-minute bucket each, apart from the first
(issue 40: "CPU per cycle at 100k at most 3x its figure at 10k").

`bench/fleet_catchup.py` measures a real collector process catching up an hour in one
cycle: twelve buckets a query, and the first bucket creating every series. A running
collector asks one bucket a cycle. Here the same simulated fleet (the demo's planted
scenario on N nodes of 8 GPUs, each node's real page every ``--step`` seconds, pushed to a
real VictoriaMetrics) is asked bucket by bucket, as the collector's cycles ask it
(:class:`~gpuscope.collector.querying.query_ingest.QueryIngest` storing into a real
:class:`~gpuscope.collector.storage.store.Store`, the service's path less its scheduler), for
each mode on its own fresh file: every summary in every bucket (``changes_only: false``)
and node summaries only where they change (the default). Per cycle: the bench process's
CPU (every thread: the shards' queries, the answers' parsing, the store), the engine's CPU,
samples stored. Reported: the first cycle, and the median and largest of the steady ones.

Run: python bench/fleet_steady.py --nodes 128 [--nodes 1250 ...]; appends one JSON line
a size to bench/results/fleet_steady.jsonl. Needs /usr/bin/victoria-metrics.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench.fleet_catchup import _cpu_of, _hwm_mb, _wait, start_victoria_metrics

BUCKET_S = 300
BUCKETS = 12
RESULTS = Path(__file__).resolve().parent / "results" / "fleet_steady.jsonl"


def cycles(base: str, db: Path, shards: int, start: float, changes_only: bool,
           engine_pid: int, buckets: int = BUCKETS) -> dict[str, Any]:  # fmt: skip
    """One bucket a cycle over ``buckets`` buckets from ``start``: each cycle's figures."""
    from gpuscope.collector.querying.query_ingest import QueryIngest
    from gpuscope.collector.storage.store import Store
    from gpuscope.core.query_settings import QuerySettings

    # no cycle deadline: a loaded machine's 100,000-GPU cycle may take minutes of wall time
    q = QuerySettings(mode="fleet", shards=shards, summaries=True, changes_only=changes_only,
                      retries=0, timeout_seconds=300, interval_seconds=3600,
                      cycle_deadline_seconds=3000)  # fmt: skip
    store = Store.open(db)
    ingest = QueryIngest(base, q, 15.0, store, store.append_scrape)
    for w in ingest.fleet.windows.values():
        w.cursor = start
    rows = []
    try:
        for k in range(buckets):
            # the cycle just after bucket k is past the engine's latency offset
            now = start + (k + 1) * BUCKET_S + q.latency_offset_seconds + 1
            cpu0, eng0, t0 = time.process_time(), _cpu_of(engine_pid), time.perf_counter()
            ingest.cycle(now)
            last = ingest.last
            assert last is not None
            assert not last.error, last.error
            rows.append({
                "cpu_s": time.process_time() - cpu0, "engine_cpu_s": _cpu_of(engine_pid) - eng0,
                "wall_s": time.perf_counter() - t0, "samples": last.samples,
                "bytes": last.stats.bytes, "queries": last.stats.queries,
            })  # fmt: skip
        cur = store.cursor()
        series = cur.execute("SELECT count(DISTINCT series_id) FROM samples").fetchone()
        cur.close()
    finally:
        ingest.client.close()
        store.close()
    steady = rows[1:]
    return {
        "first_cpu_s": rows[0]["cpu_s"],
        "first_samples": rows[0]["samples"],
        "steady_cpu_s_median": statistics.median(r["cpu_s"] for r in steady),
        "steady_cpu_s_max": max(r["cpu_s"] for r in steady),
        "steady_engine_cpu_s_median": statistics.median(r["engine_cpu_s"] for r in steady),
        "steady_wall_s_median": statistics.median(r["wall_s"] for r in steady),
        "steady_samples_median": statistics.median(r["samples"] for r in steady),
        "steady_bytes_median": statistics.median(r["bytes"] for r in steady),
        "queries_per_cycle": steady[0]["queries"],
        "series": series[0] if series else None,
        "cycles": rows,
    }


def measure(nodes: int, step: float, gpus_per_shard: int, buckets: int = BUCKETS) -> dict[str, Any]:
    from bench.fleet_sim import FleetPages, push_to_victoriametrics
    from gpuscope.sim import SimulatedCluster
    from gpuscope.sim.scenario import default_scenario

    scenario = default_scenario(nodes, steady=False)  # as fleet_catchup.py, for its reason
    cluster = SimulatedCluster(scenario)
    end = math.floor((time.time() - 900) / BUCKET_S) * BUCKET_S
    start = end - buckets * BUCKET_S
    pages = FleetPages(cluster, cluster.node_names, start - scenario.live_offset)
    shards = max(1, math.ceil(nodes * 8 / gpus_per_shard))
    tmp = Path(tempfile.mkdtemp(prefix="gpuscope-fleet-steady-"))
    vm, base = start_victoria_metrics(tmp)
    try:
        _wait(base + "/health")
        t0 = time.perf_counter()
        # one bucket before the first asked: its node summaries are compared with it
        first = start - BUCKET_S
        times = [first + k * step for k in range(int((end - first + BUCKET_S) // step))]
        for t in times:
            push_to_victoriametrics(base, pages, [t])
        httpx.get(base + "/internal/force_flush", timeout=600)
        load_s = time.perf_counter() - t0
        out: dict[str, Any] = {
            "nodes": nodes, "gpus": nodes * 8, "shards": shards, "step_s": step,
            "buckets": buckets, "load_s": load_s,
            "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        }  # fmt: skip
        for name, changes_only in (("every_bucket", False), ("changes_only", True)):
            db = tmp / f"{name}.duckdb"
            out[name] = cycles(base, db, shards, start, changes_only, vm.pid, buckets)
        out["bench_peak_rss_mb"] = _hwm_mb(__import__("os").getpid())
        return out
    finally:
        vm.terminate()
        vm.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, action="append", help="nodes of 8 GPUs (repeatable)")
    p.add_argument("--step", type=float, default=300.0, help="seconds between pages pushed")
    p.add_argument("--gpus-per-shard", type=int, default=2048)
    p.add_argument("--buckets", type=int, default=BUCKETS, help="cycles a mode, the first included")
    args = p.parse_args()
    if any(n < 6 for n in args.nodes or []):  # the default scenario's own least
        p.error("--nodes: the simulated cluster needs at least 6 nodes")
    # the code measured: the commit checked out when the run starts
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
        cwd=Path(__file__).resolve().parent,
    ).stdout.strip()  # fmt: skip
    for nodes in args.nodes or [128]:
        got = measure(nodes, args.step, args.gpus_per_shard, args.buckets)
        got["load_average"] = Path("/proc/loadavg").read_text().split()[:3]
        got["commit"] = commit
        line = json.dumps(got)
        print(line, flush=True)
        with RESULTS.open("a", encoding="utf-8") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
