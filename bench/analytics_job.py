"""Benchmark: the collector's scheduled analytics job on a store an hour old, as it runs.

bench/collector_sizes.py measures the collector's CPU over a window holding one scheduled
analytics run, but of a collector started five minutes before: its store holds five
minutes, so the run's windows (the idle fold's 45-minute look-back, the bandwidth
detector's window, the alert rules' windows: an hour of ECC counters) are mostly empty.
A collector that has run for an hour pays them whole on every run. This measures that run.

The history is written the way a collector writes it (bench/history.py: the simulated
cluster's every agent series, ``step_s`` apart, through ``Store.append_cycle``; the
hourly maintenance): ``nodes`` 8-GPU nodes with 8 InfiniBand rails each for 70 minutes at
5 s, as bench/collector_sizes.py's agents are scraped. Then the job the collector schedules
every 5 minutes (gpuscope/service.py: ``analytics_job``, every detector with its state
persisted and the findings stored, then ``alerts_job``, the shipped rules) runs at each
5-minute mark over the last hour, on the store alone (no scrape beside it), as the
collector runs it (``scheduled_run``: on ``collector.job_db_threads`` of DuckDB's threads);
the first runs build the idle state, the steady ones are measured. CPU is the process's
(every thread, DuckDB's workers included) from ``time.process_time()``; each part (each
detector's wall time, the alert rules' CPU) is measured on its own too.

What it is not: a running ``gpuscope collector`` process beside agent processes and a
Prometheus (bench/collector_sizes.py is that). It is the job's own functions in this
process on a copy of a file the ingest path wrote, with no scraping beside them and no
peer in the run: Prometheus has no counterpart of the job, so the figure is read beside
bench/collector_sizes.py's Prometheus figures.

Run: .venv/bin/python bench/analytics_job.py [--quick] [--nodes N]
(or `python -m bench --only analytics_job`); about a minute at 8 nodes once the history
is cached.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import CollectorRegistry

from bench.figure import Figure, print_figures
from bench.history import END, HistorySize, history
from gpuscope.alerts.config import load_alerts_config
from gpuscope.alerts.engine import AlertsEngine
from gpuscope.analytics.runner import DETECTORS, load_scheduled
from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import load_settings
from gpuscope.service import scheduled_run

SPAN_MIN = 70
STEP_S = 5
#: The job's interval as shipped (analytics.interval_minutes).
EVERY = timedelta(minutes=5)


def measure(nodes: int, span_min: int, runs: int) -> dict[str, Any]:
    size = HistorySize(nodes=nodes, days=span_min / 1440, step_s=STEP_S, families="agent")
    built = history(size)
    settings = load_settings(env={}, overrides={"collector": {"scrape_interval_seconds": STEP_S}})
    load_scheduled()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.duckdb"
        shutil.copy(built.path, path)
        store = Store.open(path, memory_limit=settings.collector.db_memory_limit)
        clock = [0.0]
        engine = AlertsEngine(
            store, load_alerts_config(None), clock=lambda: clock[0], registry=CollectorRegistry()
        )
        alerts_cpu: list[float] = []

        class Timed:  # the engine, its run's CPU kept for the parts
            def run(self) -> None:
                began = time.process_time()
                try:
                    engine.run()
                finally:
                    alerts_cpu.append(time.process_time() - began)

        timed = Timed()
        service = SimpleNamespace(
            store=store, settings=settings, clock=lambda: clock[0], metrics=CollectorMetrics()
        )
        cur = store.cursor()
        (samples_5m,) = cur.execute(
            "SELECT count(*) FROM samples WHERE ts > ? AND ts <= ?",
            [(END - EVERY).replace(tzinfo=None), END.replace(tzinfo=None)],
        ).fetchall()[0]
        cur.close()
        first = END - timedelta(minutes=span_min - 10)  # the state built from the start
        at, cpu = first, []
        parts: dict[str, list[float]] = {}
        try:
            while at <= END:
                clock[0] = at.timestamp()
                started = time.process_time()
                scheduled_run(service, timed)  # type: ignore[arg-type]
                total = time.process_time() - started
                if at > END - runs * EVERY:
                    cpu.append(total)
                    parts.setdefault("alerts", []).append(alerts_cpu.pop())
                    for name in DETECTORS:
                        seconds = service.metrics.registry.get_sample_value(
                            "gpuscope_collector_analytics_seconds", {"detector": name}
                        )
                        parts.setdefault(name, []).append(seconds or 0.0)
                at += EVERY
        finally:
            store.close()
    return {
        "cpu": statistics.median(cpu),
        "max": max(cpu),
        "parts": {k: statistics.median(v) for k, v in parts.items()},
        "samples_5m": samples_5m,
        "label": size.label(),
    }


def run(quick: bool = False, nodes: int | None = None) -> list[Figure]:
    n = nodes or (6 if quick else 8)  # the default scenario needs 6 nodes at least
    span = 20 if quick else SPAN_MIN
    m = measure(n, span, 2 if quick else 3)
    age = "an hour" if span >= 60 else f"{span} minutes"
    parts = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in m["parts"].items())
    return [
        Figure(
            f"scheduled analytics job, CPU a run, {n} nodes' store {age} old",
            m["cpu"] * 1000,
            "ms",
            notes=f"{m['label']}; median of the last runs (max {m['max'] * 1000:.0f} ms), "
            f"the job every 5 minutes from the start; each detector's wall time and the "
            f"alert rules' CPU: {parts}",
        ),
        Figure(
            f"same, a share of the 5 minutes' samples (CPU per stored sample it adds), {n} nodes",
            m["cpu"] / max(m["samples_5m"], 1) * 1e6,
            "µs",
            notes=f"{m['samples_5m']:,} samples stored in the last 5 minutes",
        ),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="6 nodes, 20 minutes")
    ap.add_argument("--nodes", type=int, default=None)
    args = ap.parse_args()
    print_figures(run(args.quick, args.nodes))


if __name__ == "__main__":
    main()
