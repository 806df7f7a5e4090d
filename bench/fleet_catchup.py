"""Benchmark: a real ``gpuscope collector`` process in fleet mode catching up an hour from a
real VictoriaMetrics holding a simulated fleet (issue 40).

The demo's scenario on N nodes of 8 GPUs: the agent's real page of every node every
``--step`` seconds (60) for an hour and five minutes, pushed with timestamps to a real
single-node VictoriaMetrics (``bench/fleet_sim.py``). The collector's file is left as a
collector down for that hour leaves it (every shard's window at the hour's first bucket),
then ``gpuscope collector`` starts on it and its first cycle stores the hour's twelve
buckets. Reported per size, from ``/proc`` and ``/api/v1/status``:

- time to catch up the hour (the first cycle's wall time);
- the collector's CPU for it (process total, less its start-up measured alone) and per
  bucket (a steady cycle stores one), its peak RSS (VmHWM, start-up included);
- the engine's CPU (the VictoriaMetrics process) and the bytes it answered;
- the file's growth for the hour, times 24 (disk a day);
- every shard's state after it, and buckets x series stored once.

Run: python bench/fleet_catchup.py --nodes 128 [--nodes 1250 ...] (or ``--gpus 1000``).
Needs /usr/bin/victoria-metrics (scripts/install-test-servers).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import yaml

VM = "/usr/bin/victoria-metrics"
BUCKET_S = 300
HOUR_BUCKETS = 12


def _cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _hwm_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024


def _rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_victoria_metrics(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    """VictoriaMetrics as shipped (its cache off, so each question costs what a new one
    does) on a free loopback port, its data under ``tmp``: the process and its URL. The
    caller waits for ``/health`` and stops it."""
    port = _free_port()
    vm = subprocess.Popen(
        [VM, f"-storageDataPath={tmp / 'vm'}", f"-httpListenAddr=127.0.0.1:{port}",
         "-loggerLevel=ERROR", "-search.disableCache"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return vm, f"http://127.0.0.1:{port}"


def _wait(url: str, seconds: float = 60) -> None:
    end = time.monotonic() + seconds
    while True:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)


def seed(db: Path, shards: int, at: float) -> None:
    from gpuscope.collector.storage.schema import QUERY_CURSOR_KEY, SET_META
    from gpuscope.collector.storage.store import Store

    value = json.dumps({"mode": "fleet", "step": float(BUCKET_S), "shards": shards,
                        "cursors": {str(s): at for s in range(shards)}})  # fmt: skip
    with Store.open(db) as store:
        cur = store.cursor()
        cur.execute(SET_META, [QUERY_CURSOR_KEY, value])
        cur.close()


def planted_findings(db: Path, cluster: Any, origin: float, at: float) -> dict[str, int]:
    """The detectors on what the collector stored, with the inventory the Kubernetes API
    would list at ``at``: findings by kind."""
    from datetime import UTC, datetime

    from gpuscope.analytics.runner import DETECTORS, run_on_store
    from gpuscope.collector.cluster.inventory_records import node_from_json, pod_from_json
    from gpuscope.collector.storage.store import Store
    from gpuscope.core.settings import Settings
    from gpuscope.sim.kube import nodes_json
    from gpuscope.sim.kube_pods import pods_json

    settings = Settings()
    when = datetime.fromtimestamp(at, UTC)
    with Store.open(db) as store:
        objs = nodes_json(cluster, origin=origin)["items"]
        nodes = {n["metadata"]["name"]: node_from_json(n) for n in objs}
        pods = [
            pod_from_json(p, node=nodes.get(p["spec"].get("nodeName", "")),
                          settings=settings.workloads)
            for p in pods_json(cluster, at - origin, origin=origin)["items"]
        ]  # fmt: skip
        store.record_inventory(when, nodes=list(nodes.values()), pods=pods)
        out = run_on_store(store, when, settings, DETECTORS, persist=False)
    kinds: dict[str, int] = {}
    for analysis in out.values():
        for f in analysis.findings:
            kinds[f.kind] = kinds.get(f.kind, 0) + 1
    return kinds


def run_collector(
    tmp: Path, engine: str, db: Path, shards: int, summaries: bool = False
) -> dict[str, Any]:
    """One ``gpuscope collector`` until its first cycle is done: its figures."""
    port = _free_port()
    cfg = tmp / f"collector-{port}.yaml"
    cfg.write_text(yaml.safe_dump({"collector": {
        "prometheus_url": engine, "db": str(db), "kubernetes": "none",
        "listen": f"127.0.0.1:{port}",
        "query": {"mode": "fleet", "shards": shards, "retries": 0, "timeout_seconds": 300,
                  "interval_seconds": 3600, "cycle_deadline_seconds": 3000,
                  "summaries": summaries},
    }}))  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuscope.cli.main", "collector", "--config", str(cfg)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )  # fmt: skip
    api = f"http://127.0.0.1:{port}/api/v1/status"
    try:
        status: dict[str, Any] = {}
        started = None
        while True:
            if proc.poll() is not None:
                raise RuntimeError(proc.communicate()[1].strip()[-2000:])
            try:
                status = httpx.get(api, timeout=30).json()["ingest"]["query_source"]
            except (httpx.HTTPError, ValueError, KeyError):
                time.sleep(0.2)
                continue
            if started is None:
                started = time.perf_counter()
            if status["cycles"] >= 1:
                break
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        cpu, rss = _cpu_of(proc.pid), _hwm_mb(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return {"wall_s": wall, "cpu_s": cpu, "rss_mb": rss, "status": status}


def measure(
    nodes: int, step: float, shards: int, keep: bool = False, summaries: bool = False
) -> dict[str, Any]:
    from bench.fleet_sim import FleetPages, push_to_victoriametrics
    from gpuscope.sim import SimulatedCluster
    from gpuscope.sim.scenario import default_scenario

    # the planted scenario without the ten days of steady background before it: its
    # placement is quadratic in the nodes (20+ minutes of CPU at 1,250 nodes here); every
    # GPU reports the same series either way, the planted problems are all there
    scenario = default_scenario(nodes, steady=False)
    cluster = SimulatedCluster(scenario)
    end = math.floor((time.time() - 900) / BUCKET_S) * BUCKET_S
    start = end - HOUR_BUCKETS * BUCKET_S
    pages = FleetPages(cluster, cluster.node_names, start - scenario.live_offset)
    tmp = Path(tempfile.mkdtemp(prefix="gpuscope-fleet-catchup-"))
    vm, base = start_victoria_metrics(tmp)
    try:
        _wait(base + "/health")
        # start-up alone: a collector whose first cycle has nothing to ask (no data yet)
        idle = run_collector(tmp, base, tmp / "idle.duckdb", shards, summaries)
        t0 = time.perf_counter()
        times = [start + k * step for k in range(int((end - start + BUCKET_S) // step))]
        pushed = 0
        for k, t in enumerate(times):
            pushed += push_to_victoriametrics(base, pages, [t])
            print(f"pushed step {k + 1}/{len(times)} at {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
        httpx.get(base + "/internal/force_flush", timeout=600)
        load_s = time.perf_counter() - t0
        db = tmp / "c.duckdb"
        seed(db, shards, start)
        size0 = db.stat().st_size
        engine0 = _cpu_of(vm.pid)
        engine_rss0 = _rss_mb(vm.pid)
        got = run_collector(tmp, base, db, shards, summaries)
        engine_cpu = _cpu_of(vm.pid) - engine0
        size = db.stat().st_size + (db.with_suffix(".duckdb.wal").stat().st_size
                                    if db.with_suffix(".duckdb.wal").exists() else 0)  # fmt: skip
        import duckdb

        found = planted_findings(db, cluster, start - scenario.live_offset, end)
        con = duckdb.connect(str(db), read_only=True)
        twice = con.execute(
            "SELECT count(*) FROM (SELECT series_id, ts FROM samples GROUP BY ALL "
            "HAVING count(*) > 1)"
        ).fetchone()
        buckets, series = con.execute(
            "SELECT count(DISTINCT ts), count(DISTINCT series_id) FROM samples"
        ).fetchone() or (0, 0)
        con.close()
        st = got["status"]
        return {
            "nodes": nodes, "gpus": nodes * 8, "shards": shards, "step_s": step,
            "summaries": summaries, "engine_rss_mb_loaded": engine_rss0,
            "engine_peak_rss_mb": _hwm_mb(vm.pid),
            "pushed_samples": pushed, "load_s": load_s,
            "catch_up_hour_s": got["wall_s"] - idle["wall_s"],
            "collector_cpu_s": got["cpu_s"] - idle["cpu_s"],
            "collector_cpu_per_bucket_s": (got["cpu_s"] - idle["cpu_s"]) / HOUR_BUCKETS,
            "collector_start_cpu_s": idle["cpu_s"],
            "collector_peak_rss_mb": got["rss_mb"],
            "engine_cpu_s": engine_cpu,
            "bytes_answered": st["last_cycle"]["bytes"] if st.get("last_cycle") else None,
            "queries": st["last_cycle"]["queries"] if st.get("last_cycle") else None,
            "samples_stored": st["last_cycle"]["samples"] if st.get("last_cycle") else None,
            "cycle_error": st.get("last_error"),
            "disk_per_day_mb": (size - size0) / 1e6 * 24,
            "buckets": buckets, "series": series, "duplicates": twice[0] if twice else None,
            "shard_states": sorted({s["state"] for s in st.get("shards") or []}),
            "findings": found,
        }  # fmt: skip
    finally:
        vm.terminate()
        vm.wait(60)
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, action="append", help="nodes of 8 GPUs (repeatable)")
    p.add_argument("--step", type=float, default=60.0, help="seconds between pages pushed")
    p.add_argument("--gpus-per-shard", type=int, default=256)
    p.add_argument("--summaries", action="store_true", help="collector.query.summaries")
    args = p.parse_args()
    for nodes in args.nodes or [128]:
        shards = max(1, math.ceil(nodes * 8 / args.gpus_per_shard))
        print(json.dumps(measure(nodes, args.step, shards, summaries=args.summaries)), flush=True)


if __name__ == "__main__":
    main()
