"""Benchmark the weekly report over a fortnight of a simulated cluster (the reported week
and the week before, which the report compares with).

Usage: python -m bench.report [--gpus 1000 10000] [--threads 2] [--dir DIR]

The history is written straight into a store's tables by SQL, as the collector leaves it
on a Monday morning: utilization as 5-minute roll-ups (frontier at the week's end, so no
raw sample is read), IB port counters as 5-minute roll-ups for the reported week, 8 GPUs
and 8 rails per node, 4-GPU jobs of 6 hours (a tenth pending, a fifth of them idle
notebooks) with their workload intervals and inventory versions, 20 projects with
guarantees, and an action log. Times are wall-clock seconds at DuckDB ``threads``: the
whole run (numbers, charts, HTML, CSV and Parquet) just after opening the database (its
pages not yet cached) and again, and ``build_report`` (the numbers) alone.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from analytics.report import weekly_report
from analytics.report_data import build_report
from analytics.report_week import Week
from bench.figure import Figure
from collector.store import Store
from gpuscope.settings import Settings

WEEK = Week(2025, 10)
START = WEEK.previous().start
NOW = datetime(2025, 3, 10, 7, 0, tzinfo=UTC)
GENERATIONS = 56  # 6-hour jobs over 14 days

SERIES = """
INSERT INTO series
SELECT g::UINTEGER, 'gpuscope_gpu_utilization_ratio', 'gauge', 'node-' || (g // 8),
       (g % 8)::VARCHAR, 'GPU-' || g, '', NULL, NULL, NULL, NULL, NULL, MAP {}, $start, $end, 0
FROM range($gpus) AS r(g)
UNION ALL
SELECT ($gpus + p * 3 + m)::UINTEGER,
       ['gpuscope_ib_transmit_bytes_total', 'gpuscope_ib_receive_bytes_total',
        'gpuscope_ib_port_rate_bytes_per_second'][m + 1],
       CASE WHEN m = 2 THEN 'gauge' ELSE 'counter' END, 'node-' || (p // 8), NULL, NULL, NULL,
       'mlx5_' || (p % 8), '1', NULL, NULL, NULL, MAP {}, $start, $end, 0
FROM range($gpus) AS r(p), range(3) AS mm(m)
"""
# a GPU of a job idles (0.01) in some 1-hour stretches, else runs at 0.3..0.9
UTIL = """
INSERT INTO rollup_5m_rows (series_id, bucket, min, max, sum, count, last)
SELECT g, $lo + to_minutes(k * 5), v, v, v * 20, 20, v
FROM range($gpus) AS r(g), range(288) AS kk(k),
     LATERAL (SELECT CASE WHEN hash(g // 4, $day, k // 12) % 5 = 0 THEN 0.01
                          ELSE 0.3 + (hash(g, $day, k) % 60) / 100.0 END AS v)
ORDER BY g, k
"""
IB = """
INSERT INTO rollup_5m_rows (series_id, bucket, min, max, sum, count, last)
SELECT $gpus + p * 3 + m, $lo + to_minutes(k * 5), v, v, v * 5, 5, v
FROM range($gpus) AS r(p), range(3) AS mm(m), range(288) AS kk(k),
     LATERAL (SELECT CASE WHEN m = 2 THEN 50e9
                          ELSE (hash(p) % 1000) / 1000.0 * 50e9 * 300 END AS v)
ORDER BY p, m, k
"""
PODS = """
INSERT INTO inventory_pods
SELECT 'proj-' || (j % 20) || '/job-' || j || '-' || gen,
       json_object('namespace', 'proj-' || (j % 20), 'name', 'job-' || j || '-' || gen,
                   'node', CASE WHEN j % 10 = 0 THEN NULL ELSE 'node-' || (j // 2) END,
                   'phase', CASE WHEN j % 10 = 0 THEN 'Pending' ELSE 'Running' END,
                   'gpu_request', 4, 'gpu_fraction', NULL, 'fraction_devices', 1,
                   'project', 'proj-' || (j % 20), 'owner_kind', 'PyTorchJob',
                   'owner_name', 'job-' || j, 'labels', json_object('owner', 'user' || (j % 97)),
                   'kind', CASE WHEN j % 5 = 1 THEN 'interactive' ELSE 'training' END),
       $start + to_hours(gen * 6),
       CASE WHEN gen = $last THEN NULL ELSE $start + to_hours(gen * 6 + 6) END
FROM range($jobs) AS r(j), range($gens) AS g(gen)
"""
INTERVALS = """
INSERT INTO workload_intervals
SELECT 'proj-' || (j % 20), 'job-' || j || '-' || gen, 'main', 'node-' || (j // 2),
       (j % 2 * 4 + g)::VARCHAR, 'GPU-' || (j * 4 + g),
       CASE WHEN j % 5 = 1 THEN 'interactive' ELSE 'training' END, 'proj-' || (j % 20),
       j % 5 = 1, 'node-' || (j // 2), $start + to_hours(gen * 6),
       $start + to_hours(gen * 6 + 6),
       CASE WHEN gen = $last THEN NULL ELSE $start + to_hours(gen * 6 + 6) END
FROM range($jobs) AS r(j), range($gens) AS gg(gen), range(4) AS q(g)
WHERE j % 10 <> 0
"""
NODES = """
INSERT INTO inventory_nodes
SELECT 'node-' || n, json_object('name', 'node-' || n, 'gpu_model', 'H100',
       'allocatable_gpus', 8, 'cpu_milli', 128000), $start, NULL
FROM range($nodes) AS r(n)
"""
QUOTAS = """
INSERT INTO quotas
SELECT 'kueue//proj-' || i, json_object('project', 'proj-' || i, 'guaranteed_gpus',
       $gpus / 20 * (0.5 + (i % 3) * 0.25), 'source', 'kueue'), $start, NULL
FROM range(20) AS r(i)
"""
ACTIONS = """
INSERT INTO actions
SELECT 'act-' || i, $week + to_minutes(i * 10), 'idle_session', NULL, i % 2 = 0, 'ok',
       json_object('namespace', 'proj-' || (i % 20), 'pod', 'job-' || i, 'node', 'node-1',
                   'gpus', 4.0, 'policy', 'idle', 'reason', 'idle',
                   'action', CASE WHEN i % 3 = 0 THEN 'warn' ELSE 'delete' END,
                   'gpu_hours_freed', CASE WHEN i % 3 = 0 THEN NULL ELSE 8.0 END)
FROM range(1000) AS r(i)
"""


def build(path: Path, gpus: int) -> None:
    end = WEEK.end
    jobs = gpus // 4
    with Store.open(path) as store:
        con = store.cursor()
        con.execute(SERIES, {"gpus": gpus, "start": START, "end": end})
        for day in range(14):
            lo = START + timedelta(days=day)
            con.execute(UTIL, {"gpus": gpus, "lo": lo, "day": day})
            if lo >= WEEK.start:
                con.execute(IB, {"gpus": gpus, "lo": lo})
        params = {"jobs": jobs, "start": START, "gens": GENERATIONS, "last": GENERATIONS - 1}
        con.execute(PODS, params)
        con.execute(INTERVALS, params)
        con.execute(NODES, {"nodes": gpus // 8, "start": START})
        con.execute(QUOTAS, {"gpus": gpus, "start": START})
        con.execute(ACTIONS, {"week": WEEK.start})
        con.execute("INSERT OR REPLACE INTO meta VALUES ('rollup_5m_until', ?)", [end])
        con.execute("CHECKPOINT")


def measure(gpus: int, tmp: Path, threads: int = 2) -> dict[str, float]:
    """Build the store for ``gpus`` and time the report on it."""
    settings = Settings.model_validate({"report": {"price_per_gpu_hour": 2.0}})
    path = tmp / f"report-{gpus}.duckdb"
    t = time.perf_counter()
    build(path, gpus)
    t_build = time.perf_counter() - t
    with Store.open(path, read_only=True) as store:
        con = store.cursor()
        con.execute(f"SET threads = {int(threads)}")
        rows = con.execute("SELECT count(*) FROM samples_5m").fetchone()
        out = tmp / "out"
        t = time.perf_counter()
        result = weekly_report(con, settings, now=NOW, out_dir=out)
        t_cold = time.perf_counter() - t
        t = time.perf_counter()
        result = weekly_report(con, settings, now=NOW, out_dir=out)
        t_warm = time.perf_counter() - t
        t = time.perf_counter()
        report = build_report(con, WEEK, settings, now=NOW)
        t_data = time.perf_counter() - t
    return {
        "build_s": t_build,
        "rows": float(rows[0] if rows else 0),
        "cold_s": t_cold,
        "warm_s": t_warm,
        "data_s": t_data,
        "page_kb": result.html.stat().st_size / 1e3,
        "allocated": report.metric("allocated_gpu_hours"),
        "idle": report.metric("idle_gpu_hours"),
        "efficiency": report.metric("efficiency"),
        "whatif_policies": max(0, report.tables["whatif"].height - 1),
        "whatif_note": report.whatif_note,
    }


def run(quick: bool = False) -> list[Figure]:
    """The runner's entry (bench/runner.py): 1,000 and 10,000 GPUs (quick: 200)."""
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory() as tmp:
        for gpus in [200] if quick else [1000, 10000]:
            m = measure(gpus, Path(tmp))
            label = f"{gpus:,} GPUs, 7 days (and the week before)"
            figures += [
                Figure(
                    f"weekly report, {label}: whole report, first run after opening",
                    m["cold_s"], "s", aim="< 30 s at 10,000 GPUs" if gpus == 10000 else None,
                    notes="numbers, charts, HTML, CSV and Parquet", key=gpus == 10000,
                ),
                Figure(f"weekly report, {label}: again", m["warm_s"], "s"),
                Figure(f"weekly report, {label}: the numbers alone", m["data_s"], "s"),
            ]  # fmt: skip
    return figures


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for gpus in args.gpus:
            m = measure(gpus, Path(tmp), args.threads)
            print(
                f"{gpus} GPUs, 14 days, {m['rows']:,.0f} roll-up rows "
                f"(built in {m['build_s']:.0f} s), threads={args.threads}:\n"
                f"  whole report (numbers, charts, HTML, CSV, Parquet): first run after "
                f"opening {m['cold_s']:.1f} s, again {m['warm_s']:.1f} s; numbers alone "
                f"{m['data_s']:.1f} s; page {m['page_kb']:.0f} kB\n"
                f"  allocated {m['allocated']:,.0f} GPU-h, idle {m['idle']:,.0f}, efficiency "
                f"{m['efficiency']:.3f}\n"
                f"  what-if: {m['whatif_policies']} policies replayed {m['whatif_note']}"
            )


if __name__ == "__main__":
    main()
