"""Benchmark the quota and bandwidth detectors over 7 days of a simulated cluster.

Usage: python -m bench.quota_bandwidth [--quick] [--gpus 1000 10000] [--threads 2] [--dir DIR]
(or `python -m bench --only quota_bandwidth`)

The history is written straight into a store's tables by SQL (generating it through the
scrape path would take far longer than the detectors): 8 GPUs and 8 IB rails per node,
per port tx/rx/transmit-wait/error counters (as increases) and the link-rate gauge every
60 s for 7 days; the first 6 days sorted by (series, time) as compaction leaves them, the
last in scrape (time) order. Pods: 4-GPU jobs of 6 h each, 20 projects, 10 % pending,
with their workload intervals. ``bandwidth_history`` is timed over all 7 days (2,016
five-minute windows) against the same windows as single runs (estimated from the re-runs).
Times are wall-clock seconds at DuckDB ``threads``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analytics.bandwidth import bandwidth_history, run_bandwidth
from analytics.quota import run_quota
from bench.figure import Figure, Reference, print_figures
from collector.store import Store
from gpuscope.settings import AnalyticsSettings

END = datetime(2025, 3, 10, 0, 0, 0)
DAYS = 7
STEP_S = 60
METRICS = (
    ("gpuscope_ib_transmit_bytes_total", "counter"),
    ("gpuscope_ib_receive_bytes_total", "counter"),
    ("gpuscope_ib_transmit_wait_total", "counter"),
    ("gpuscope_ib_port_rate_bytes_per_second", "gauge"),
    ("gpuscope_ib_errors_total", "counter"),
)

SERIES = """
INSERT INTO series
SELECT (p * 5 + $m)::UINTEGER, $metric, $kind, 'node-' || (p // 8), NULL, NULL, NULL,
       'mlx5_' || (p % 8), '1', NULL, NULL, NULL,
       CASE WHEN $m = 4 THEN MAP {'type': 'symbol_error'} ELSE MAP {} END, $start, $end, 0
FROM range($ports) AS r(p)
"""
# rate 50 GB/s; share per port in [0, 1): a few ports near the link rate
SAMPLES = """
INSERT INTO samples
SELECT (p * 5 + m)::UINTEGER AS series_id, $lo + to_seconds(k * $step) AS ts,
       CASE m WHEN 3 THEN 50e9
              WHEN 4 THEN CASE WHEN hash(p, k) % 50000 = 0 THEN 1 ELSE 0 END
              WHEN 2 THEN greatest(share - 0.9, 0) * 1e6 * $step
              ELSE share * 50e9 * $step END AS value
FROM range($ports) AS r(p), range(5) AS mm(m), range($steps) AS kk(k),
     LATERAL (SELECT (hash(p) % 1000) / 1000.0 AS share)
ORDER BY {order}
"""
PODS = """
INSERT INTO inventory_pods
SELECT 'proj-' || (j % 20) || '/job-' || j || '-' || gen,
       json_object('namespace', 'proj-' || (j % 20), 'name', 'job-' || j || '-' || gen,
                   'node', CASE WHEN j % 10 = 0 THEN NULL ELSE 'node-' || (j // 2) END,
                   'phase', CASE WHEN j % 10 = 0 THEN 'Pending' ELSE 'Running' END,
                   'gpu_request', 4, 'gpu_fraction', NULL, 'fraction_devices', 1,
                   'project', 'proj-' || (j % 20)),
       $start + to_hours(gen * 6),
       CASE WHEN gen = 27 THEN NULL ELSE $start + to_hours(gen * 6 + 6) END
FROM range($jobs) AS r(j), range(28) AS g(gen)
"""
INTERVALS = """
INSERT INTO workload_intervals
SELECT 'proj-' || (j % 20), 'job-' || j || '-' || gen, 'main', 'node-' || (j // 2),
       (j % 2 * 4 + g)::VARCHAR, 'GPU-' || j || '-' || g, 'training', 'proj-' || (j % 20),
       false, 'node-' || (j // 2), $start + to_hours(gen * 6), $start + to_hours(gen * 6 + 6),
       CASE WHEN gen = 27 THEN NULL ELSE $start + to_hours(gen * 6 + 6) END
FROM range($jobs) AS r(j), range(28) AS gg(gen), range(4) AS q(g)
WHERE j % 10 <> 0
"""
QUOTAS = """
INSERT INTO quotas
SELECT 'kueue//proj-' || i, json_object('project', 'proj-' || i, 'guaranteed_gpus',
       $gpus / 20 * (0.5 + (i % 3) * 0.25), 'source', 'kueue'), $start, NULL
FROM range(20) AS r(i)
"""


def build(path: Path, gpus: int) -> None:
    ports, jobs = gpus, gpus // 4
    start = END - timedelta(days=DAYS)
    with Store.open(path) as store:
        con = store.cursor()
        for m, (metric, kind) in enumerate(METRICS):
            params = {"m": m, "metric": metric, "kind": kind, "ports": ports}
            con.execute(SERIES, params | {"start": start, "end": END})
        per_day = 86400 // STEP_S
        for day in range(DAYS):
            order = "series_id, ts" if day < DAYS - 1 else "ts, series_id"
            lo = start + timedelta(days=day, seconds=STEP_S)
            con.execute(
                SAMPLES.format(order=order),
                {"ports": ports, "steps": per_day, "lo": lo, "step": STEP_S},
            )
        con.execute(PODS, {"jobs": jobs, "start": start})
        con.execute(INTERVALS, {"jobs": jobs, "start": start})
        con.execute(QUOTAS, {"gpus": gpus, "start": start})
        con.execute("CHECKPOINT")


def timed(fn: object, *args: object, **kw: object) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn(*args, **kw)  # type: ignore[operator]
    return time.perf_counter() - t, out


def measure(gpus: int, threads: int, reruns: int, workdir: Path) -> dict[str, float]:
    cfg = AnalyticsSettings()
    path = workdir / f"bench-{gpus}.duckdb"
    t_build, _ = timed(build, path, gpus)
    with Store.open(path, read_only=True) as store:
        con = store.cursor()
        con.execute(f"SET threads = {int(threads)}")
        rows = con.execute("SELECT count(*) FROM samples").fetchone()
        timed(run_bandwidth, con, END, cfg)  # warm the cache like a running collector
        t_bw, bw = timed(run_bandwidth, con, END, cfg)
        t_q, q = timed(run_quota, con, END, cfg)
        t_q1, _ = timed(run_quota, con, END, cfg, window=timedelta(days=1))
        # re-runs of past windows, spread over the 7 days (compacted days included)
        span = timedelta(days=DAYS) - timedelta(hours=1)
        past = [END - span * i / reruns for i in range(reruns)]
        t_re = sum(timed(run_bandwidth, con, t, cfg)[0] for t in past)
        # full re-analysis: every 5-minute window of the 7 days in one query
        t_hist, hist = timed(bandwidth_history, con, END - timedelta(days=DAYS), END, cfg)
        windows = len(hist)  # type: ignore[arg-type]
        hot_windows = sum(bool(p) for _, p in hist)  # type: ignore[attr-defined]
    path.unlink()
    print(
        f"{gpus} GPUs, {rows[0] if rows else 0:,} IB samples at {STEP_S} s "
        f"(built in {t_build:.0f} s), threads={threads}: "
        f"{len(bw.findings)} bandwidth findings, {bw.summary['hot_ports']} hot ports, "  # type: ignore[attr-defined]
        f"{hot_windows} hot windows, {len(q.findings)} quota findings",  # type: ignore[attr-defined]
        file=sys.stderr,
    )
    return {
        "samples": rows[0] if rows else 0,
        "bandwidth_s": t_bw,
        "rerun_s": t_re / len(past),
        "history_s": t_hist,
        "windows": windows,
        "quota_s": t_q,
        "quota_1d_s": t_q1,
    }


def run(quick: bool = False) -> list[Figure]:
    """Quota and bandwidth at 1,000 and 10,000 GPUs (quick: 80 GPUs, 3 past windows)."""
    sizes, reruns = ((80,), 3) if quick else ((1000, 10_000), 24)
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for gpus in sizes:
            r = measure(gpus, 2, reruns, Path(tmp))
            what = f"{DAYS} d of {gpus:,} GPUs"
            figures += [
                Figure(
                    f"quota, {what}: scheduled run (7-day window)",
                    r["quota_s"],
                    "s",
                    notes="the full re-analysis is the same query",
                ),
                Figure(f"quota, {what}: 1-day window", r["quota_1d_s"], "s"),
                Figure(
                    f"bandwidth (IB, NVLink, PCIe), {what}: scheduled run",
                    r["bandwidth_s"],
                    "s",
                    notes=f"IB at {STEP_S} s, {r['samples'] / 1e6:,.0f} M samples",
                ),
                Figure(
                    f"bandwidth, {what}: full re-analysis",
                    r["history_s"],
                    "s",
                    reference=Reference(
                        f"the same {r['windows']:,.0f} windows as scheduled runs, estimated "
                        f"from {reruns} past runs",
                        r["rerun_s"] * r["windows"],
                        "s",
                    ),
                    notes="every 5-minute window of the week in one query",
                    key=gpus >= 10_000,
                ),
            ]
    return figures


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gpus", type=int, nargs="+", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--reruns", type=int, default=24, help="past bandwidth windows to re-run")
    args = ap.parse_args()
    if args.gpus is None:
        print_figures(run(args.quick))
        return
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for gpus in args.gpus:
            print(gpus, measure(gpus, args.threads, args.reruns, Path(tmp)))


if __name__ == "__main__":
    main()
