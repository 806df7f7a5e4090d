"""Benchmark: the collector store's ingest throughput and its database file on disk.

Measures
- ingest: samples/s from columnar batches to committed rows, at 1,000 and 10,000 GPUs'
  worth of series per batch (12 generated metrics a GPU), and at one 8-GPU node's scrape
  per batch (steady state: every series already known);
- the file on disk, the user's path: the agent's real page (its collector and simulated
  sources, its page rendered by ``AgentCollector.render`` as ``gpuscope agent`` serves it)
  for each of
  ``--nodes`` simulated 8-GPU nodes, every 15 s for ``--hours``, parsed by the collector
  (``page_to_outcome``) and stored a cycle a transaction (``Store.append_cycle``); then the
  store's own maintenance (``apply_retention``: roll-ups, retention, compaction of the
  closed day; ``reclaim_space``: the file rewritten without free blocks). The figure is the
  file's size (``os.stat``) over the samples stored, roll-ups included. Prometheus's TSDB
  gets exactly the same samples with the same (whole-second) timestamps as OpenMetrics,
  turned into blocks by ``promtool tsdb create-blocks-from openmetrics``, in the same run.

Run: .venv/bin/python bench/store.py [--quick] [--nodes 3] [--hours 24]
(or `python -m bench --only store`)
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb

from bench.figure import Figure, Reference, print_figures
from bench.machine import tool_version
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.scraping.outcome import Target
from gpuscope.collector.scraping.page_outcome import TargetCache, page_to_outcome
from gpuscope.collector.storage.store import Store

INTERVAL_MS = 15_000
GIB = 1 << 30
MIB = 1 << 20
METRICS = (
    "gpuscope_gpu_utilization_ratio",
    "gpuscope_gpu_memory_utilization_ratio",
    "gpuscope_gpu_sm_active_ratio",
    "gpuscope_gpu_tensor_active_ratio",
    "gpuscope_gpu_dram_active_ratio",
    "gpuscope_gpu_memory_used_bytes",
    "gpuscope_gpu_memory_total_bytes",
    "gpuscope_gpu_power_watts",
    "gpuscope_gpu_temperature_celsius",
    "gpuscope_gpu_energy_joules_total",
    "gpuscope_gpu_sm_clock_hertz",
    "gpuscope_gpu_memory_clock_hertz",
)
TYPES = {m: "gauge" for m in METRICS} | {"gpuscope_gpu_energy_joules": "counter"}


class Cluster:
    """``gpus`` GPUs, 8 a node; 60 % busy (noisy ratios near a slowly drifting level)."""

    def __init__(self, gpus: int, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.n = gpus
        self.busy = [self.rng.random() < 0.6 for _ in range(gpus)]
        self.level = [self.rng.uniform(0.4, 0.95) if b else 0.0 for b in self.busy]
        self.mem = [
            self.rng.randint(20, 75) * GIB + self.rng.randint(0, 1023) * MIB if b else 512 * MIB
            for b in self.busy
        ]
        self.energy = [self.rng.uniform(1e6, 1e9) for _ in range(gpus)]
        labels: list[tuple[tuple[str, str], ...]] = []
        for g in range(gpus):
            node, index = f"gpu-node-{g // 8:04d}", str(g % 8)
            labels.append(
                (
                    ("gpu", index),
                    ("mig_instance", ""),
                    ("node", node),
                    ("uuid", f"GPU-{g:08x}-0000-0000-0000-000000000000"),
                )
            )
        # Metric-major, as an exposition groups a family's series together.
        self.names = [m for m in METRICS for _ in range(gpus)]
        self.labels = [lab for _ in METRICS for lab in labels]

    def tick(self) -> list[float]:
        rng, n = self.rng, self.n
        ratios: list[list[float]] = [[] for _ in range(5)]
        mem, power, temp, energy, clock = [], [], [], [], []
        for g in range(n):
            if self.busy[g]:
                if rng.random() < 0.01:
                    self.level[g] = min(0.99, max(0.2, self.level[g] + rng.gauss(0, 0.1)))
                lv = self.level[g]
                for k, scale in enumerate((1.0, 0.6, 0.9, 0.5, 0.55)):
                    ratios[k].append(round(min(1.0, max(0.0, lv * scale + rng.gauss(0, 0.02))), 4))
                if rng.random() < 0.002:
                    self.mem[g] = rng.randint(20, 75) * GIB + rng.randint(0, 1023) * MIB
                p = round(250 + 400 * lv + rng.gauss(0, 15), 3)
                t = float(round(45 + 35 * lv + rng.gauss(0, 1)))
                c = 1755e6 if rng.random() < 0.05 else 1980e6
            else:
                for k in range(5):
                    ratios[k].append(0.0)
                p, t, c = (
                    round(68 + rng.gauss(0, 1.5), 3),
                    float(round(33 + rng.gauss(0, 0.7))),
                    345e6,
                )
            mem.append(float(self.mem[g]))
            power.append(p)
            temp.append(t)
            self.energy[g] = round(self.energy[g] + p * 15 + rng.gauss(0, 5), 3)
            energy.append(self.energy[g])
            clock.append(c)
        total = [80.0 * GIB] * n
        memclock = [2619e6] * n
        return [
            *ratios[0],
            *ratios[1],
            *ratios[2],
            *ratios[3],
            *ratios[4],
            *mem,
            *total,
            *power,
            *temp,
            *energy,
            *clock,
            *memclock,
        ]


def throughput(gpus: int, batches: int, workdir: Path) -> float:
    """Samples/s of steady-state append_scrape calls (values pre-generated, not timed)."""
    cluster = Cluster(gpus)
    ticks = [cluster.tick() for _ in range(min(batches, 4))]
    path = workdir / f"tp-{gpus}.duckdb"
    with Store.open(path) as store:
        t0 = 1_750_000_000_000
        store.append_scrape(Batch("bench", t0, cluster.names, cluster.labels, ticks[0], TYPES))
        start = time.perf_counter()
        for i in range(1, batches + 1):
            batch = Batch(
                "bench",
                t0 + i * INTERVAL_MS,
                cluster.names,
                cluster.labels,
                ticks[i % len(ticks)],
                TYPES,
            )
            store.append_scrape(batch)
        elapsed = time.perf_counter() - start
    return batches * len(cluster.names) / elapsed


def _cycle_pages(nodes: int) -> tuple[list[Any], list[Target], list[TargetCache], Any]:
    """One agent per simulated node (its real collector and sources, as ``gpuscope agent
    --gpu-source sim`` runs them), the collector's target and parse cache for each, and
    the simulated clock to move."""
    from gpuscope.agent.devices.sim import SimAttributor, SimGpuSource, SimIbSource
    from gpuscope.agent.serving.exposition import AgentCollector
    from gpuscope.sim import SimulatedCluster, default_scenario

    cluster = SimulatedCluster(default_scenario(nodes=max(6, nodes)))
    now = [0.0]

    def clock() -> float:
        return now[0]

    agents = [
        AgentCollector(
            node,
            SimGpuSource(cluster, node, clock),
            SimIbSource(cluster, node, clock),
            SimAttributor(cluster, node, clock),
        )
        for node in cluster.node_names[:nodes]
    ]
    targets = [Target(url=f"http://{n}:9835/metrics") for n in cluster.node_names[:nodes]]
    return agents, targets, [TargetCache() for _ in targets], now


def _om_value(v: float) -> str:
    return "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf") if math.isinf(v) else repr(v)


def _om_labels(labels: tuple[tuple[str, str], ...]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in labels) + "}"


def density(nodes: int, hours: float, workdir: Path, prometheus: bool) -> dict[str, Any]:
    """A day of the agent's real pages for ``nodes`` simulated nodes at 15 s, through the
    collector's parse and :meth:`Store.append_cycle` (one transaction a cycle), then the
    store's own maintenance; the same samples with the same timestamps as OpenMetrics for
    promtool (one file per family, joined at the end: OpenMetrics keeps a family together).
    """
    agents, targets, caches, sim_now = _cycle_pages(nodes)
    cycles = int(hours * 3600_000 / INTERVAL_MS)
    t0 = 1_750_032_000  # 2025-06-16 00:00 UTC, whole seconds: what both stores keep
    path = workdir / "density.duckdb"
    families: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    series_per_gpu = 0.0
    render = parse = 0.0
    append_ms: list[float] = []
    prom_samples = 0
    running = Store.open(workdir / "running.duckdb")  # the running collector's schedule
    running_peak = 0
    with Store.open(path) as store, running:
        for i in range(cycles):
            ts = t0 + i * 15
            sim_now[0] = 30 * 3600 + i * 15.0  # a busy stretch of the scenario
            a = time.perf_counter()
            pages = [agent.render() for agent in agents]
            b = time.perf_counter()
            batches = []
            for target, cache, page in zip(targets, caches, pages, strict=True):
                out = page_to_outcome(target, page, float(ts), cache=cache)
                assert out.batch is not None
                batches.append((out.batch, 0.0))
            c = time.perf_counter()
            store.append_cycle(batches)
            append_ms.append((time.perf_counter() - c) * 1e3)
            running.append_cycle(batches)
            if ts % 3600 == 420:  # hourly at minute 7, what CollectorService schedules
                running.maintain(datetime.fromtimestamp(ts, UTC))
                running_peak = max(running_peak, _file_and_wal(running.path))
            render, parse = render + b - a, parse + c - b
            if i == 0:
                series_per_gpu = sum(len(bt.names) for bt, _ in batches) / (8 * nodes)
            if prometheus:
                for bt, _ in batches:
                    kinds.update(bt.types)
                    for name, labels, value in zip(bt.names, bt.labels, bt.values, strict=True):
                        fam = families.get(name)
                        if fam is None:
                            fam = families[name] = (workdir / f"f{len(families)}.om").open("w")
                        fam.write(f"{name}{_om_labels(labels)} {_om_value(value)} {ts}\n")
                    prom_samples += len(bt.names)
            if i % 960 == 959:
                print(f"  {(i + 1) / 240:.0f} h ingested", file=sys.stderr)
        running_day = _file_and_wal(running.path)  # the day being written, at its end
        running_day_file = running.path.stat().st_size
        end = t0 + cycles * 15
        at = end - end % 3600 + 420  # the next run at minute 7, the day closed
        running.maintain(datetime.fromtimestamp(at if at >= end else at + 3600, UTC))
        running_after = _file_and_wal(running.path)
        running_rewrites = running.rewrites
        n = store.samples_stored()
        store.checkpoint()
        live = path.stat().st_size
        a = time.perf_counter()
        done = store.apply_retention(datetime.fromtimestamp(t0 + 86400 + 3900, UTC))
        maintain = time.perf_counter() - a
        after_maintenance = path.stat().st_size
        a = time.perf_counter()
        reclaimed = store.reclaim_space(min_free_ratio=0)
        reclaim_s = time.perf_counter() - a
        rows = (
            store.cursor()
            .execute(
                "SELECT (SELECT count(*) FROM rollup_5m_rows), "
                "(SELECT count(*) FROM rollup_1h_rows), (SELECT count(*) FROM rollup_5m_raw)"
            )
            .fetchone()
        )
    final = path.stat().st_size
    res: dict[str, Any] = {
        "samples": n,
        "series_per_gpu": series_per_gpu,
        "render_s": render,
        "parse_s": parse,
        "append_ms": append_ms,
        "live_file": live,
        "after_maintenance_file": after_maintenance,
        "file": final,
        "maintenance_s": maintain,
        "reclaim_s": reclaim_s,
        "reclaimed": reclaimed.reclaimed_bytes,
        "rollup_rows": rows,
        "compacted_rows": done["compacted"],
        "running_day": running_day,
        "running_day_file": running_day_file,
        "running_peak": max(running_peak, running_day),
        "running_file": running_after,
        "running_rewrites": running_rewrites,
    }
    if prometheus:
        res |= _promtool(families, kinds, workdir) | {"prometheus samples": prom_samples}
    else:
        for fam in families.values():
            fam.close()
    return res


def _file_and_wal(path: Path) -> int:
    """The database file and its write-ahead log, as they are on disk now."""
    wal = path.with_name(path.name + ".wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def _promtool(families: dict[str, Any], kinds: dict[str, str], workdir: Path) -> dict[str, Any]:
    """Join the families into one OpenMetrics file and let promtool make TSDB blocks."""
    import shutil
    import subprocess

    for fam in families.values():
        fam.close()
    promtool = shutil.which("promtool")
    if promtool is None:
        for fam in families.values():
            Path(fam.name).unlink()
        return {}
    om = workdir / "series.om"
    with om.open("w") as out:
        for name, fam in families.items():
            family = name.removesuffix("_total")
            kind = kinds.get(family, "gauge")
            out.write(f"# TYPE {family} {kind if kind in ('counter', 'gauge') else 'gauge'}\n")
            with open(fam.name) as src:
                shutil.copyfileobj(src, out)
            Path(fam.name).unlink()
        out.write("# EOF\n")
    blocks = workdir / "prom-blocks"
    a = time.perf_counter()
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(blocks)],
                   check=True, capture_output=True)  # fmt: skip
    took = time.perf_counter() - a
    om.unlink()
    files = [f for f in blocks.rglob("*") if f.is_file()]
    return {
        # 2-hour blocks as promtool leaves them, each with its index
        "prometheus_blocks": sum(f.stat().st_size for f in files),
        "prometheus_chunks": sum(f.stat().st_size for f in files if f.parent.name == "chunks"),
        "promtool_s": took,
    }


def spread(values: list[float]) -> str:
    """min / median / p99 of timings."""
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
    return f"min {ordered[0]:.1f} / median {statistics.median(ordered):.1f} / p99 {p99:.1f}"


def run(
    quick: bool = False,
    *,
    nodes: int | None = None,
    hours: float | None = None,
    batches: int = 40,
    density_run: bool = True,
    prometheus: bool = True,
) -> list[Figure]:
    """Ingest rates, and the database file per sample beside Prometheus's TSDB on the same
    samples.

    Full: batches of 8 / 1,000 / 10,000 GPUs; 3 simulated nodes (24 GPUs) x 24 h for the
    file (``--nodes 125`` for 1,000 GPUs: opt-in, tens of minutes).
    Quick: 8 / 1,000 GPUs with a few batches, and 2 nodes x 2 h.
    """
    nodes = nodes or (2 if quick else 3)
    hours = hours or (2.0 if quick else 24.0)
    figures = []
    with tempfile.TemporaryDirectory(prefix="gpuscope-bench-") as tmp:
        work = Path(tmp)
        for size in (8, 1000) if quick else (8, 1000, 10_000):
            n = min(2000, max(4, batches * 1000 // size))
            if quick:
                n = min(n, 50)
            rate = throughput(size, n, work)
            per_tx = size * 12
            figures.append(
                Figure(
                    f"store alone, {per_tx:,} samples a transaction"
                    + (" (one 8-GPU node's scrape)" if size == 8 else ""),
                    rate / 1e3 if size == 8 else rate / 1e6,
                    "k samples/s" if size == 8 else "M samples/s",
                    notes=f"{per_tx / rate * 1e3:.1f} ms a transaction" if size == 8 else "",
                )
            )
        if not density_run:
            return figures
        res = density(nodes, hours, work, prometheus)
    version = tool_version("promtool")
    n = res["samples"]
    where = (
        f"{nodes} simulated nodes ({8 * nodes} GPUs, {res['series_per_gpu']:.0f} series a GPU "
        f"as the agent's page carries them) x {hours:g} h at 15 s: {n:,} samples"
    )
    file_b = res["file"] / n
    have = "prometheus_blocks" in res

    def ref(key: str, what: str) -> Reference:
        if not have:
            return Reference.not_installed("promtool" if prometheus else "skipped")
        return Reference(f"Prometheus {version} TSDB, {what}", res[key] / n, "B/sample")

    figures += [
        Figure(
            "database file per sample after the store's maintenance (roll-ups, compaction, "
            "space given back), roll-ups included",
            file_b,
            "B/sample",
            aim="≤ 0.6 × Prometheus",
            reference=ref("prometheus_blocks", "2-hour blocks as promtool leaves them"),
            notes=where,
            key=True,
        ),
        Figure(
            "database file (+ WAL) per sample as the running collector leaves it after the "
            "day (its hourly maintenance, space given back by itself; no offline rewrite)",
            res["running_file"] / n,
            "B/sample",
            aim="≤ 0.8 × Prometheus",
            reference=ref("prometheus_blocks", "2-hour blocks as promtool leaves them"),
            notes="the same cycles into a second store, Store.maintain at minute 7 of "
            f"every hour as CollectorService runs it, and once after the day closed; "
            f"{res['running_rewrites']} rewrites by itself",
            key=True,
        ),
        Figure(
            "same, the day being written at its end (segments, the day so far as one run)",
            res["running_day"] / n,
            "B/sample",
            notes=f"the file alone {res['running_day_file'] / n:.2f} B/sample, the rest "
            f"DuckDB's WAL ({(res['running_day'] - res['running_day_file']) / MIB:.1f} MiB, "
            f"checkpointed at 16 MiB); largest during the day: "
            f"{res['running_peak'] / n:.2f} B/sample",
        ),
        Figure(
            "same file, beside Prometheus's chunks alone (its samples without indexes)",
            file_b,
            "B/sample",
            reference=ref("prometheus_chunks", "chunk files only"),
        ),
        Figure(
            "file before maintenance (the day as scraped)",
            res["live_file"] / n,
            "B/sample",
        ),
        Figure(
            "file after maintenance, before space is given back",
            res["after_maintenance_file"] / n,
            "B/sample",
        ),
        Figure(
            "maintenance: roll-ups, retention, compaction of the day",
            res["maintenance_s"],
            "s",
            notes=f"{res['compacted_rows']:,} rows compacted; roll-up rows (5m, 1h, coarse "
            f"ranges) {res['rollup_rows']}",
        ),
        Figure(
            "giving space back (rewrite to a fresh file)",
            res["reclaim_s"],
            "s",
            notes=f"{res['reclaimed'] / MIB:.1f} MiB given back",
        ),
        Figure(
            "ingest of a cycle (append_cycle, one transaction)",
            statistics.median(res["append_ms"]),
            "ms",
            notes=spread(res["append_ms"]) + f" ms over {len(res['append_ms']):,} cycles",
        ),
    ]
    if have:
        figures.append(
            Figure(
                "database file / Prometheus blocks, same samples and timestamps",
                res["file"] / res["prometheus_blocks"],
                "×",
                aim="≤ 0.6×",
                notes=f"promtool tsdb create-blocks-from openmetrics, same run "
                f"({res['promtool_s']:.0f} s, one run); "
                f"{res['prometheus samples']:,} samples given",
                key=True,
            )
        )
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--nodes", type=int, default=None, help="simulated 8-GPU nodes for the file run (3)"
    )
    ap.add_argument("--hours", type=float, default=None, help="hours of 15 s cycles (24)")
    ap.add_argument("--batches", type=int, default=40, help="batches per throughput run")
    ap.add_argument("--skip-density", action="store_true")
    ap.add_argument(
        "--skip-prometheus",
        action="store_true",
        help="skip the Prometheus TSDB comparison (needs promtool)",
    )
    args = ap.parse_args()
    print(f"duckdb {duckdb.__version__}, {os.cpu_count()} CPUs")
    print_figures(
        run(
            args.quick,
            nodes=args.nodes,
            hours=args.hours,
            batches=args.batches,
            density_run=not args.skip_density,
            prometheus=not args.skip_prometheus,
        )
    )


if __name__ == "__main__":
    main()
