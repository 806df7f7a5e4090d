"""Benchmark: latency of the main API queries over 7 days of 1,000 GPUs at a 15 s interval.

The series are created through the store (one cycle, as a collector would), then the week's
samples are bulk-inserted day by day from polars (a bench shortcut: going through the ingest
path for 40,320 cycles would take most of an hour on 2 cores; ingest is measured in
ingest.py). Then the collector's own maintenance runs: roll-ups and daily compaction. Each
API call goes through FastAPI in process (TestClient), so routing, validation and JSON are
included; the time is the median of --repeat calls.

Per GPU: utilization, memory used, power, temperature; per workload (one a GPU, 12
namespaces, 6 projects): its utilization and its info series. 6,000 series, ~242M samples.

Run: .venv/bin/python bench/api.py [--quick] [--gpus 1000] [--days 7] [--repeat 7]
(or `python -m bench --only api`)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import polars as pl
from fastapi.testclient import TestClient

from bench.figure import Figure, format_value, print_figures
from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.http_api.api import ApiState, create_app
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store

STEP_S = 15
DAY = 86_400
T0 = datetime(2026, 11, 9, tzinfo=UTC)  # a Monday
GPU_METRICS = (
    "gpuscope_gpu_utilization_ratio",
    "gpuscope_gpu_memory_used_bytes",
    "gpuscope_gpu_power_watts",
    "gpuscope_gpu_temperature_celsius",
)


def register_series(store: Store, gpus: int) -> None:
    names, labels, values = [], [], []
    for g in range(gpus):
        gpu = {
            "node": f"gpu-node-{g // 8:04d}",
            "gpu": str(g % 8),
            "uuid": f"GPU-{g:08x}-0000-0000-0000-000000000000",
            "mig_instance": "",
        }
        for m in GPU_METRICS:
            names.append(m)
            labels.append(tuple(sorted(gpu.items())))
            values.append(0.0)
        ns = f"team-{g % 12:02d}"
        work = {**gpu, "namespace": ns, "pod": f"job-{g:05d}-0", "container": "main"}
        info = {
            **work,
            "workload_kind": "training",
            "interactive": "false",
            "project": f"project-{g % 6}",
        }
        names += ["gpuscope_gpu_workload_utilization_ratio", "gpuscope_gpu_workload_info"]
        labels += [tuple(sorted(work.items())), tuple(sorted(info.items()))]
        values += [0.0, 1.0]
    batch = Batch("bench", int(T0.timestamp() * 1000) - 15_000, names, labels, values, {})
    store.append_cycle([(batch, 0.0)])


def fill(store: Store, days: int) -> int:
    con = store._con  # bench shortcut: bulk insert, see the module docstring
    n_series = con.execute("SELECT count(*) FROM series").fetchall()[0][0]
    per_day = DAY // STEP_S
    total = 0
    for d in range(days):
        start = int((T0 + timedelta(days=d)).timestamp())
        frame = (
            pl.DataFrame({"series_id": pl.arange(0, n_series, eager=True, dtype=pl.UInt32)})
            .join(pl.DataFrame({"tick": pl.arange(0, per_day, eager=True)}), how="cross")
            .with_columns(
                pl.from_epoch(pl.col("tick") * STEP_S + start, time_unit="s").alias("ts"),
                (
                    (
                        (pl.col("series_id").cast(pl.Int64) * 2654435761 + pl.col("tick") * 40503)
                        % 10_000
                    )
                    / 10_000
                ).alias("value"),
            )
            .select("series_id", pl.col("ts").cast(pl.Datetime("ms")), "value")
            .sort("ts")
        )
        table = frame.to_arrow()
        con.register("day_rows", table)
        con.execute("INSERT INTO samples SELECT series_id, ts, value FROM day_rows")
        con.unregister("day_rows")
        total += frame.height
        print(f"  day {d + 1}: {frame.height:,} samples", file=sys.stderr)
    # what ingestion would have kept current: when each series was last seen
    end = (T0 + timedelta(days=days)).replace(tzinfo=None)
    con.execute("UPDATE series SET last_seen = ?", [end])
    return total


def timed(
    client: TestClient, path: str, params: dict[str, object], repeat: int
) -> tuple[float, str]:
    """Median milliseconds of ``repeat`` calls, and the answer's shape (to see it is real)."""
    times = []
    for _ in range(repeat):
        a = time.perf_counter()
        r = client.get(path, params=params)
        times.append(time.perf_counter() - a)
        assert r.status_code == 200, r.text
    body = r.json()
    series = body.get("series")
    if isinstance(series, list) and series:
        shape = f"{len(series)} series x {len(series[0]['points'])} points"
    else:
        shape = "no series" if isinstance(series, list) else f"{len(body)} fields"
    return statistics.median(times) * 1000, shape


def measure(gpus: int, days: int, repeat: int) -> tuple[int, list[tuple[str, float, str]]]:
    """Samples stored, and (case, median ms, answer shape) for each API case."""
    end = T0 + timedelta(days=days)
    with tempfile.TemporaryDirectory(prefix="gpuscope-api-") as tmp:
        store = Store.open(Path(tmp) / "api.duckdb")
        register_series(store, gpus)
        a = time.perf_counter()
        samples = fill(store, days)
        b = time.perf_counter()
        store.apply_retention(end + timedelta(minutes=5))
        c = time.perf_counter()
        store.compact(end + timedelta(minutes=5))
        store.checkpoint()
        d = time.perf_counter()
        print(
            f"{gpus} GPUs x {days} days: {samples:,} samples "
            f"(fill {b - a:.0f} s, roll-ups {c - b:.0f} s, compaction {d - c:.0f} s)",
            file=sys.stderr,
        )
        state = ApiState(
            store=store, targets=TargetRegistry(), metrics=CollectorMetrics(), clock=end.timestamp
        )
        client = TestClient(create_app(state))
        week = {"start": T0.isoformat(), "end": end.isoformat()}
        last_hour = {"start": (end - timedelta(hours=1)).isoformat(), "end": end.isoformat()}
        nodes = max(1, gpus // 8)
        cases = [
            ("cluster, 1 h steps", "/api/v1/utilization", {**week, "step": 3600}),
            (
                f"by node ({nodes:,} nodes), 1 h steps",
                "/api/v1/utilization",
                {**week, "by": "node", "step": 3600, "limit": 1000},
            ),
            (
                "by project, 1 h steps",
                "/api/v1/utilization",
                {**week, "by": "project", "step": 3600},
            ),
            (
                "by namespace (12), 5-minute steps",
                "/api/v1/utilization",
                {**week, "by": "namespace", "step": 300},
            ),
            (
                f"every GPU ({gpus:,}), last hour, 15 s steps",
                "/api/v1/utilization",
                {**last_hour, "by": "gpu", "step": 15, "limit": 1000},
            ),
            (
                "one node's GPUs, 1 h steps",
                "/api/v1/utilization",
                {**week, "by": "gpu", "step": 3600, "node": "gpu-node-0002"},
            ),
            ("`/api/v1/status`", "/api/v1/status", {}),
        ]
        out = []
        for name, path, params in cases:
            ms, shape = timed(client, path, params, repeat)
            out.append((name, ms, shape))
        store.close()
    return samples, out


def run(quick: bool = False) -> list[Figure]:
    """API latency over 7 days of 1,000 GPUs (quick: 40 GPUs, 1 day)."""
    gpus, days, repeat = (40, 1, 2) if quick else (1000, 7, 7)
    samples, cases = measure(gpus, days, repeat)
    span = f"{days} days" if days > 1 else "1 day"
    figures = []
    for i, (name, ms, shape) in enumerate(cases):
        week_case = "last hour" not in name and "status" not in name
        figures.append(
            Figure(
                f"API over {span} of {gpus:,} GPUs: {name}" if i == 0 else f"same: {name}",
                ms,
                "ms",
                aim="< 200 ms" if week_case else None,
                notes=(
                    f"{format_value(samples / 1e6, 'M samples')}; median of {repeat}, "
                    f"through FastAPI; {shape}"
                    if i == 0
                    else shape
                ),
                key=i == 0,
            )
        )
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gpus", type=int, default=None)
    ap.add_argument("--days", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=None)
    args = ap.parse_args()
    if args.gpus or args.days or args.repeat:
        _, cases = measure(args.gpus or 1000, args.days or 7, args.repeat or 7)
        for name, ms, shape in cases:
            print(f"  {name:42s} {ms:8.1f} ms   ({shape})")
        return
    print_figures(run(args.quick))


if __name__ == "__main__":
    main()
