"""Benchmark the quota and bandwidth detectors over 7 days of a simulated cluster.

Usage: python -m bench.quota_bandwidth [--gpus 1000 10000] [--threads 2] [--dir DIR]

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
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from analytics.bandwidth import bandwidth_history, run_bandwidth
from analytics.quota import run_quota
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--reruns", type=int, default=24, help="past bandwidth windows to re-run")
    args = ap.parse_args()
    cfg = AnalyticsSettings()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for gpus in args.gpus:
            path = Path(tmp) / f"bench-{gpus}.duckdb"
            t_build, _ = timed(build, path, gpus)
            with Store.open(path, read_only=True) as store:
                con = store.cursor()
                con.execute(f"SET threads = {int(args.threads)}")
                rows = con.execute("SELECT count(*) FROM samples").fetchone()
                timed(run_bandwidth, con, END, cfg)  # warm the cache like a running collector
                t_bw, bw = timed(run_bandwidth, con, END, cfg)
                t_q, q = timed(run_quota, con, END, cfg)
                t_q1, _ = timed(run_quota, con, END, cfg, window=timedelta(days=1))
                # re-runs of past windows, spread over the 7 days (compacted days included)
                span = timedelta(days=DAYS) - timedelta(hours=1)
                past = [END - span * i / args.reruns for i in range(args.reruns)]
                t_re = sum(timed(run_bandwidth, con, t, cfg)[0] for t in past)
                # full re-analysis: every 5-minute window of the 7 days in one query
                t_hist, hist = timed(bandwidth_history, con, END - timedelta(days=DAYS), END, cfg)
                windows = len(hist)  # type: ignore[arg-type]
                hot_windows = sum(bool(p) for _, p in hist)  # type: ignore[attr-defined]
            print(
                f"{gpus} GPUs, {rows[0] if rows else 0:,} IB samples at {STEP_S} s "
                f"(built in {t_build:.0f} s), threads={args.threads}:\n"
                f"  bandwidth scheduled run {t_bw:.3f} s "
                f"({len(bw.findings)} findings, {bw.summary['hot_ports']} hot ports)\n"  # type: ignore[attr-defined]
                f"  bandwidth past windows: {t_re / len(past):.3f} s each "
                f"({len(past)} over 7 days)\n"
                f"  bandwidth history, 7 days at 5 min: {t_hist:.1f} s for {windows} windows "
                f"({hot_windows} with hot ports; {t_re / len(past) * windows:.0f} s as runs)\n"
                f"  quota 7-day window {t_q:.3f} s ({len(q.findings)} findings), "  # type: ignore[attr-defined]
                f"1-day window {t_q1:.3f} s"
            )


if __name__ == "__main__":
    main()
