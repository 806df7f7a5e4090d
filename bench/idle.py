"""Benchmark: idle detection on a history made through the ingest path (bench/history.py).

The database is the one a collector leaves: the simulated cluster's agent series every
15 s through ``Store.append_cycle``, its inventory, and the store's own hourly maintenance
(roll-ups, compaction). This module also reports what building it cost: the ingest and the
maintenance, each its own row (the history is shared with bench/quota_bandwidth.py and
bench/report.py, which do not repeat them).

Measured, on a private copy of that database:
  full      -- ``run_idle`` with no saved state (``persist=False``, as ``gpuscope analyze
               idle`` runs): 7 days of roll-ups (``samples_5m`` up to the roll-up frontier)
               plus the raw samples after it; the rows it reads are counted and named
  scheduled -- the collector's schedule: a first persisted run at the history's end, then
               N times: 5 more minutes of cycles appended through the same ingest path
               (untimed), and the scheduled run timed (it reads the raw samples since its
               saved watermark)

Run: .venv/bin/python bench/idle.py [--quick] (or `python -m bench --only idle`);
GPUSCOPE_BENCH_HISTORY=large for 7 days of 10,000 GPUs (see bench/history.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import peak
from bench.figure import Figure, print_figures
from bench.history import (
    CycleMaker,
    History,
    append_cycles,
    chosen_size,
    rows_between,
    scenario_cluster,
)
from bench.history import history as get_history
from bench.timing import Spread, time_alternating, time_once
from gpuscope.analytics.detectors.idle import HISTORY, LATE_DELAY, LOOKBACK, RAW_HORIZON, run_idle
from gpuscope.collector.storage.store import Store
from gpuscope.core.collector_settings import CollectorSettings, WorkloadSettings
from gpuscope.core.settings import AnalyticsSettings

#: the series the detector reads (gpuscope/analytics/sql/idle.sql: busy_candidates, workload series)
ACTIVITY = (
    "gpuscope_gpu_sm_active_ratio",
    "gpuscope_gpu_utilization_ratio",
    "gpuscope_gpu_memory_utilization_ratio",
    "gpuscope_gpu_workload_utilization_ratio",
)
STEP = timedelta(minutes=5)


#: the memory limit the CLI and the collector open the database with
LIMIT = CollectorSettings().db_memory_limit


def _floor(t: datetime, seconds: int) -> datetime:
    return datetime.fromtimestamp(t.timestamp() // seconds * seconds, UTC)


def full_reads(store: Store, at: datetime) -> tuple[int, int]:
    """(roll-up rows, raw samples) a full re-analysis at ``at`` reads
    (gpuscope/analytics/detectors/idle.py: roll-ups over ``HISTORY`` up to the frontier, raw samples
    after it)."""
    row = store.cursor().execute("SELECT value FROM meta WHERE key = 'rollup_5m_until'").fetchone()
    frontier = datetime.fromisoformat(str(row[0])).replace(tzinfo=UTC) if row else at
    lo = min(_floor(at - RAW_HORIZON, 300), frontier)
    return (
        rows_between(store, "samples_5m", ACTIVITY, at - HISTORY, lo),
        rows_between(store, "samples", ACTIVITY, lo, at + timedelta(seconds=1)),
    )


def full_once(db: str, at: datetime, memory_limit: str | None = None) -> str:
    """One full re-analysis on ``db`` (read-only), for bench/peak.py's own process, with
    DuckDB's ``memory_limit`` (None: its default, 80 % of RAM)."""
    with Store.open(Path(db), read_only=True, memory_limit=memory_limit) as store:
        result = run_idle(store, at, AnalyticsSettings(), WorkloadSettings(), persist=False)
    return f"{result.summary['idle_sessions']} idle sessions"


def measure(h: History, runs: int) -> dict[str, object]:
    cfg, wl = AnalyticsSettings(), WorkloadSettings()
    end = h.end
    with tempfile.TemporaryDirectory(prefix="gpuscope-idle-") as tmp:
        store = Store.open(h.copy_to(Path(tmp)), memory_limit=LIMIT)
        try:
            rolled, raw = full_reads(store, end)
            store.close()
            alone = None if h.size.gpus >= 10_000 else peak.measure(full_once, str(store.path), end)
            bounded = peak.measure(full_once, str(store.path), end, LIMIT)
            store = Store.open(store.path, memory_limit=LIMIT)
            full = time_alternating(
                lambda: run_idle(store, end, cfg, wl, persist=False),
                n=runs,
                warmup=0 if h.size.gpus >= 10_000 else 1,
            )
            # the schedule: a first persisted run, then 5 more minutes and a run, N times
            run_idle(store, end, cfg, wl)
            cluster, origin = scenario_cluster(h.size.nodes)
            maker = CycleMaker(cluster, origin, h.size.families)
            times, read, at, result = [], 0, end, None
            for _ in range(runs):
                nxt = at + STEP
                append_cycles(store, maker, at.timestamp(), nxt.timestamp(), h.size.step_s)
                # since the saved watermark, and the look-back that learns the spacing
                since = at - LATE_DELAY - LOOKBACK
                read += rows_between(store, "samples", ACTIVITY, since, nxt + timedelta(seconds=1))
                secs, result = time_once(partial(run_idle, store, nxt, cfg, wl))
                times.append(secs)
                at = nxt
        finally:
            store.close()
    summary = full.result.summary
    return {
        "full": full.product,
        "peak": alone,
        "bounded": bounded,
        "scheduled": Spread.of(times),
        "rolled": rolled,
        "raw": raw,
        "sched_raw": read // runs,
        "idle_sessions": summary["idle_sessions"],
        "sched_findings": len(result.findings) if result is not None else 0,
    }


def history_figures(h: History) -> list[Figure]:
    """What making the benchmark history cost: the ingest and the product's maintenance."""
    m = h.maintenance
    cached = f"; built {h.built_at}"
    ingested = h.samples - h.vectorised_samples
    built: list[Figure] = []
    if h.vectorised_samples:
        built.append(
            Figure(
                f"benchmark history, {h.size.label()}: whole build (bench/history_fast.py)",
                h.build_s,
                "s",
                aim="30 min on 2 cores" if h.size.gpus >= 10_000 else None,
                notes=f"{h.vectorised_samples:,} samples of the analysed families vectorised "
                f"and rolled up by the store's apply_retention in {h.vectorised_s:,.0f} s, "
                f"then {ingested:,} through Store.append_cycle; simulator set-up included",
                key=h.size.gpus >= 10_000,
            )
        )
    return [
        *built,
        Figure(
            f"benchmark history, {h.size.label()}: ingest (Store.append_cycle)",
            ingested / h.ingest_s,
            "samples/s",
            notes=f"{ingested:,} samples in {h.ingest_s:.1f} s{cached}",
        ),
        Figure(
            "same: the store's own maintenance (hourly apply_retention: roll-ups, compaction)",
            h.maintenance_s,
            "s",
            notes=f"{m.get('rolled_5m', 0):,} 5-minute and {m.get('rolled_1h', 0):,} hourly "
            f"roll-up rows, {m.get('compacted', 0):,} samples compacted",
        ),
        Figure("same: database file after maintenance", h.file_bytes / h.samples, "B/sample",
               notes=f"{h.file_bytes / 2**20:,.1f} MiB, roll-ups included"),
    ]  # fmt: skip


def run(quick: bool = False) -> list[Figure]:
    """Idle detection on the shared history (quick: 3 h of 48 GPUs; default 1 d of 104)."""
    h = get_history(chosen_size(quick))
    runs = 3 if quick else 2 if h.size.gpus >= 10_000 else 7
    r = measure(h, runs)
    what = f"idle sessions, {h.size.label()}"
    big = h.size.gpus >= 10_000
    full: Spread = r["full"]  # type: ignore[assignment]
    sched: Spread = r["scheduled"]  # type: ignore[assignment]
    return [
        *history_figures(h),
        Figure.timed(
            f"{what}: scheduled run (every 5 minutes, 5 minutes appended through ingest)",
            sched,
            "s",
            aim="10 s at 10,000 GPUs" if big else None,
            notes=f"reads {r['sched_raw']:,} raw samples of the activity series a run "
            "(5 new minutes and the 45-minute look-back)",
            key=big,
        ),
        Figure.timed(
            f"{what}: full re-analysis (no saved state)",
            full,
            "s",
            aim="60 s at 10,000 GPUs" if big else None,
            notes=f"reads {r['rolled']:,} samples_5m rows and {r['raw']:,} raw samples of "
            f"the activity series; {r['idle_sessions']} idle sessions found",
            key=big,
        ),
        *peak.rss_figures(r["peak"], r["bounded"], LIMIT, big=big),  # type: ignore[arg-type]
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    print_figures(run(ap.parse_args().quick))


if __name__ == "__main__":
    main()
