"""Benchmark: the collector store's ingest throughput and bytes on disk per sample.

Generates realistic per-GPU series (12 metrics a GPU: five ratios with 4 decimals of noise,
memory bytes mostly constant, clocks that step, temperature in whole degrees, power in mW,
an energy counter that grows by power x interval) and appends them through
:meth:`collector.store.Store.append_scrape` as the collector does: columnar batches, one
transaction each.

Measures
- ingest: samples/s from columnar batches to committed rows, at 1,000 and 10,000 GPUs'
  worth of series per batch, and at one 8-GPU node's scrape per batch (steady state:
  every series already known);
- bytes per sample: ``--gpus`` GPUs over ``--hours`` of one UTC day at a 15 s interval,
  ingested in tick-wide batches: file size after CHECKPOINT / samples as scraped; the
  same rows in the order per-node batches would leave them, and sorted with timestamps in
  ms (copies to fresh files); then after :meth:`Store.compact` rewrote the closed day
  sorted by (series_id, ts): bytes in used blocks, the file (freed blocks are reused by
  later days, not returned), and a fresh copy.

Run: .venv/bin/python bench/store.py [--quick] [--gpus 1000] [--hours 24] [--jitter-ms 40]
(or `python -m bench --only store`)
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb
import pyarrow as pa  # type: ignore[import-untyped]

from bench.figure import Figure, Reference, print_figures
from bench.machine import tool_version
from collector.batch import Batch
from collector.store import Store

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


def copy_size(store: Store, dst: Path, select: str, **tables: pa.Table) -> int:
    """File size of the store's series and ``select`` (rows of samples) in a fresh file."""
    cur = store.cursor()
    cur.execute("SET enable_progress_bar = false")
    for name, table in tables.items():
        cur.register(name, table)
    cur.execute("ATTACH ? AS cp", [str(dst)])
    cur.execute("CREATE TABLE cp.series AS SELECT * FROM series")
    cur.execute(f"CREATE TABLE cp.samples AS {select}")
    cur.execute("DETACH cp")
    cur.close()
    size = dst.stat().st_size
    dst.unlink()
    return size


def used_bytes(store: Store) -> int:
    """Bytes in used blocks: the file less blocks freed (reused by later writes)."""
    (used, block) = store.cursor().execute(
        "SELECT used_blocks, block_size FROM pragma_database_size()"
    ).fetchone() or (0, 0)
    return int(used) * int(block)


def density(gpus: int, hours: float, jitter_ms: int, workdir: Path) -> dict[str, float]:
    """Ingest ``hours`` of one UTC day in tick-wide batches, then compact the day."""
    cluster = Cluster(gpus)
    rng = random.Random(1)
    ticks = int(hours * 3600_000 / INTERVAL_MS)
    path = workdir / "density.duckdb"
    t0 = 1_750_032_000_000  # 2025-06-16 00:00 UTC
    gen = ingest = 0.0
    res: dict[str, float] = {}
    scraped_ms: list[int] = []  # the scrape times as the scraper gave them, jitter and all
    with Store.open(path) as store:
        for i in range(ticks):
            a = time.perf_counter()
            values = cluster.tick()
            ts = t0 + i * INTERVAL_MS + rng.randint(-jitter_ms, jitter_ms)
            scraped_ms.append(ts)
            b = time.perf_counter()
            store.append_scrape(Batch("bench", ts, cluster.names, cluster.labels, values, TYPES))
            ingest += time.perf_counter() - b
            gen += b - a
            if i % 240 == 239:
                print(f"  {(i + 1) / 240:.0f} h ingested", file=sys.stderr)
        store.checkpoint()
        n = store.samples_stored()
        res |= {"samples": n, "ingest_samples_per_s": n / ingest, "generate_s": gen}
        res["B/sample scrape order (live file)"] = path.stat().st_size / n
        by_node = "SELECT s.* FROM samples s JOIN series r USING (series_id) "
        by_node += "ORDER BY s.ts, r.node, s.series_id"
        res["B/sample per-node batch order (copy)"] = (
            copy_size(store, workdir / "c.duckdb", by_node) / n
        )
        # What keeping ms would cost sorted: samples hold seconds, so join the ms back.
        truth = pa.table(
            {
                "s": pa.array([t // 1000 for t in scraped_ms], pa.timestamp("s")),
                "ms": pa.array(scraped_ms, pa.timestamp("ms")),
            }
        )
        ms = "SELECT series_id, t.ms AS ts, value FROM samples JOIN truth t ON t.s = samples.ts"
        res["B/sample sorted, ts in ms (copy)"] = (
            copy_size(store, workdir / "c.duckdb", f"{ms} ORDER BY series_id, ts", truth=truth) / n
        )
        a = time.perf_counter()
        store.compact(datetime(2025, 6, 17, 0, 5))
        res["compact_s"] = time.perf_counter() - a
        store.checkpoint()
        res["B/sample compacted (used blocks)"] = used_bytes(store) / n
        res["B/sample compacted (file, freed blocks not yet reused)"] = path.stat().st_size / n
        res["B/sample compacted (fresh copy)"] = (
            copy_size(store, workdir / "c.duckdb", "SELECT * FROM samples") / n
        )
    return res


def prometheus_density(gpus: int, hours: float, jitter_ms: int, workdir: Path) -> dict[str, float]:
    """The same series (same seeds) as :func:`density`, stored by Prometheus's TSDB.

    Written as OpenMetrics (each family's samples together, as the format requires) and
    turned into blocks by ``promtool tsdb create-blocks-from openmetrics``; bytes are the
    blocks' files (chunks, index, meta) over samples.
    """
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    if promtool is None:
        return {}
    cluster = Cluster(gpus)
    rng = random.Random(1)
    ticks = int(hours * 3600_000 / INTERVAL_MS)
    t0 = 1_750_032_000_000
    parts = [workdir / f"family-{i}.om" for i in range(len(METRICS))]
    handles = [p.open("w") for p in parts]
    label_text = [
        "{" + ",".join(f'{k}="{v}"' for k, v in lab) + "}" for lab in cluster.labels[:gpus]
    ]
    samples = 0
    for i in range(ticks):
        values = cluster.tick()
        ts = (t0 + i * INTERVAL_MS + rng.randint(-jitter_ms, jitter_ms)) / 1000
        for m, handle in enumerate(handles):
            name = METRICS[m]
            base = m * gpus
            handle.write("".join(
                f"{name}{label_text[g]} {values[base + g]!r} {ts:.3f}\n" for g in range(gpus)
            ))  # fmt: skip
            samples += gpus
    for handle in handles:
        handle.close()
    om = workdir / "series.om"
    with om.open("w") as out:
        for m, part in enumerate(parts):
            family = METRICS[m].removesuffix("_total")
            kind = "counter" if METRICS[m].endswith("_total") else "gauge"
            out.write(f"# TYPE {family} {kind}\n")
            with part.open() as src:
                shutil.copyfileobj(src, out)
            part.unlink()
        out.write("# EOF\n")
    blocks = workdir / "prom-blocks"
    a = time.perf_counter()
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(blocks)],
                   check=True, capture_output=True)  # fmt: skip
    took = time.perf_counter() - a
    om.unlink()
    files = [f for f in blocks.rglob("*") if f.is_file()]
    size = sum(f.stat().st_size for f in files)
    chunks = sum(f.stat().st_size for f in files if f.parent.name == "chunks")
    return {
        "prometheus samples": samples,
        # 2-hour blocks as promtool leaves them: each repeats every series in its index
        "prometheus B/sample (blocks)": size / samples,
        # the compressed samples alone: what larger, compacted blocks tend towards
        "prometheus B/sample (chunks only)": chunks / samples,
        "promtool_s": took,
    }


def run(
    quick: bool = False,
    *,
    gpus: int | None = None,
    hours: float | None = None,
    jitter_ms: int = 40,
    batches: int = 40,
    density_run: bool = True,
    prometheus: bool = True,
) -> list[Figure]:
    """Ingest rates and bytes per sample beside Prometheus's TSDB on the same series.

    Full: batches of 8 / 1,000 / 10,000 GPUs, and 1,000 GPUs x 24 h for the bytes.
    Quick: 8 / 1,000 GPUs with a few batches, and 20 GPUs x 2 h.
    """
    gpus = gpus or (20 if quick else 1000)
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
        res = density(gpus, hours, jitter_ms, work)
        prom = prometheus_density(gpus, hours, jitter_ms, work) if prometheus else {}
    version = tool_version("promtool")
    where = f"{gpus:,} GPUs x 12 metrics x {hours:g} h at 15 s, {res['samples']:,.0f} samples"
    best = res["B/sample compacted (used blocks)"]

    def ref(key: str, what: str) -> Reference:
        if not prom:
            return Reference.not_installed("promtool" if prometheus else "skipped")
        return Reference(f"Prometheus {version} TSDB, {what}", prom[key], "B/sample")

    figures += [
        Figure(
            "bytes on disk per raw sample after daily compaction (blocks in use)",
            best,
            "B/sample",
            aim="≤ 0.85 × Prometheus",
            reference=ref("prometheus B/sample (chunks only)", "chunks alone"),
            notes=where,
            key=True,
        ),
        Figure(
            "same, beside Prometheus's 2-hour blocks with their indexes",
            best,
            "B/sample",
            reference=ref("prometheus B/sample (blocks)", "blocks as promtool leaves them"),
        ),
        Figure(
            "same, compacted day in a fresh copy",
            res["B/sample compacted (fresh copy)"],
            "B/sample",
        ),
        Figure(
            "bytes per raw sample of the day still being written (scrape order)",
            res["B/sample scrape order (live file)"],
            "B/sample",
        ),
        Figure("daily compaction of that day", res["compact_s"], "s"),
    ]
    if prom:
        figures.append(
            Figure(
                "compacted DuckDB / Prometheus chunks, same series",
                best / prom["prometheus B/sample (chunks only)"],
                "×",
                aim="≤ 0.85×",
                notes="promtool tsdb create-blocks-from openmetrics, same run",
                key=True,
            )
        )
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gpus", type=int, default=None, help="GPUs for the bytes/sample run")
    ap.add_argument("--hours", type=float, default=None)
    ap.add_argument("--jitter-ms", type=int, default=40, help="scrape timestamp jitter")
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
            gpus=args.gpus,
            hours=args.hours,
            jitter_ms=args.jitter_ms,
            batches=args.batches,
            density_run=not args.skip_density,
            prometheus=not args.skip_prometheus,
        )
    )


if __name__ == "__main__":
    main()
