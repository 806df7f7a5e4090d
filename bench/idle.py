"""Benchmark: idle detection over 7 days of N GPUs (default 1,000; run with --gpus 10000).

The series and workload intervals are created through the store (one cycle, as a
collector would); the week's samples (one utilization gauge per GPU at --step seconds) are
bulk-inserted day by day from polars (a bench shortcut, as in bench/api.py), then rolled up
by the store's own maintenance. One GPU in five idles at 1 %, the others vary 0..100 %;
one workload in ten is interactive.

Measured:
  full   -- run_idle with no saved state: the 7-day re-analysis (roll-ups + raw tail)
  sched  -- 5 more minutes of samples appended, then the scheduled (incremental) run

Run: .venv/bin/python bench/idle.py [--quick] [--gpus 1000] [--days 7] [--step 60]
(or `python -m bench --only idle`: 1,000 and 10,000 GPUs at 15 s)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import polars as pl

from analytics.idle import run_idle
from bench.figure import Figure, print_figures
from collector.batch import Batch
from collector.store import Store
from gpuscope.settings import AnalyticsSettings, WorkloadSettings

DAY = 86_400
T0 = datetime(2026, 11, 9, tzinfo=UTC)


def register(store: Store, gpus: int, step: int) -> None:
    names, labels, values = [], [], []
    for g in range(gpus):
        gpu = {
            "node": f"gpu-node-{g // 8:04d}",
            "gpu": str(g % 8),
            "uuid": f"GPU-{g:08x}",
            "mig_instance": "",
        }
        names.append("gpuscope_gpu_utilization_ratio")
        labels.append(tuple(sorted(gpu.items())))
        values.append(0.0)
        kind = "interactive" if g % 10 == 0 else "training"
        info = {
            **gpu,
            "namespace": f"team-{g % 12:02d}",
            "pod": f"pod-{g:05d}",
            "container": "main",
            "workload_kind": kind,
            "interactive": str(kind == "interactive").lower(),
            "project": f"p{g % 6}",
        }
        names.append("gpuscope_gpu_workload_info")
        labels.append(tuple(sorted(info.items())))
        values.append(1.0)
    ms = int(T0.timestamp() * 1000) - step * 1000
    store.append_cycle([(Batch("bench", ms, names, labels, values, {}), 0.0)])


def insert(store: Store, start: int, ticks: int, step: int) -> int:
    """Utilization samples of every GPU for ``ticks`` ticks from Unix second ``start``."""
    con = store._con  # bench shortcut: bulk insert, see the module docstring
    ids = con.execute(
        "SELECT series_id FROM series WHERE metric = 'gpuscope_gpu_utilization_ratio'"
    ).fetchall()
    sid = pl.DataFrame({"series_id": [r[0] for r in ids]}, schema={"series_id": pl.UInt32})
    frame = (
        sid.join(pl.DataFrame({"tick": pl.arange(0, ticks, eager=True)}), how="cross")
        .with_columns(
            pl.from_epoch(pl.col("tick") * step + start, time_unit="s").alias("ts"),
            pl.when(pl.col("series_id") % 5 == 0)
            .then(0.01)
            .otherwise(
                (
                    (pl.col("series_id").cast(pl.Int64) * 2654435761 + pl.col("tick") * 40503)
                    % 10_000
                )
                / 10_000
            )
            .alias("value"),
        )
        .select("series_id", pl.col("ts").cast(pl.Datetime("ms")), "value")
        .sort("ts")
    )
    con.register("rows", frame.to_arrow())
    con.execute("INSERT INTO samples SELECT series_id, ts, value FROM rows")
    con.unregister("rows")
    return frame.height


def measure(gpus: int, days: int, step: int) -> dict[str, float]:
    """Seconds of the full re-analysis and of the scheduled run, and the samples stored."""
    cfg, wl = AnalyticsSettings(), WorkloadSettings()
    end = T0 + timedelta(days=days)
    with tempfile.TemporaryDirectory(prefix="gpuscope-idle-") as tmp:
        store = Store.open(Path(tmp) / "idle.duckdb")
        register(store, gpus, step)
        a = time.perf_counter()
        n = sum(
            insert(store, int(T0.timestamp()) + d * DAY, DAY // step, step) for d in range(days)
        )
        b = time.perf_counter()
        store.apply_retention(end)
        store.checkpoint()
        c = time.perf_counter()
        print(
            f"{gpus} GPUs x {days} d at {step} s: {n:,} samples "
            f"(fill {b - a:.0f} s, roll-ups+compaction {c - b:.0f} s)",
            file=sys.stderr,
        )
        # the intervals were last seen at registration; a live collector touches them
        store._con.execute("UPDATE workload_intervals SET last_seen = ?", [end])
        t = time.perf_counter()
        full = run_idle(store, end, cfg, wl, scrape_interval_s=step)
        t_full = time.perf_counter() - t
        insert(store, int(end.timestamp()), 300 // step, step)
        later = end + timedelta(minutes=5)
        store._con.execute("UPDATE workload_intervals SET last_seen = ?", [later])
        t = time.perf_counter()
        sched = run_idle(store, later, cfg, wl, scrape_interval_s=step)
        t_sched = time.perf_counter() - t
        for name, secs, res in (("full", t_full, full), ("scheduled", t_sched, sched)):
            s = res.summary
            print(f"  {name:>10}: {secs:6.2f} s  findings={len(res.findings)} "
                  f"idle_sessions={s['idle_sessions']} idle_gpus={s['idle_gpus']} "
                  f"unknown={s['unknown_workloads']}", file=sys.stderr)  # fmt: skip
        store.close()
    return {"samples": n, "full_s": t_full, "scheduled_s": t_sched}


def run(quick: bool = False) -> list[Figure]:
    """Idle detection over 7 days of 1,000 and 10,000 GPUs at 15 s (quick: 40 GPUs, 1 day)."""
    cases = [(40, 1, 60)] if quick else [(1000, 7, 15), (10_000, 7, 15)]
    figures = []
    for gpus, days, step in cases:
        r = measure(gpus, days, step)
        big = gpus >= 10_000
        what = f"idle sessions, {days} d of {gpus:,} GPUs at {step} s"
        notes = f"{r['samples'] / 1e6:,.1f} M samples"
        figures += [
            Figure(
                f"{what}: scheduled run (every 5 minutes)",
                r["scheduled_s"],
                "s",
                aim="10 s at 10,000 GPUs" if big else None,
                notes=notes,
                key=big,
            ),
            Figure(
                f"{what}: full re-analysis",
                r["full_s"],
                "s",
                aim="60 s at 10,000 GPUs" if big else None,
                key=big,
            ),
        ]
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gpus", type=int, default=None)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--step", type=int, default=60, help="sample interval, seconds")
    args = ap.parse_args()
    if args.gpus:
        print(measure(args.gpus, args.days, args.step))
        return
    print_figures(run(args.quick))


if __name__ == "__main__":
    main()
