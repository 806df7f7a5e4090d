"""Benchmark: the quota and bandwidth detectors on a history made through ingest.

The database is the shared benchmark history (bench/history.py): the simulated cluster's
agent series every 15 s through ``Store.append_cycle`` -- the InfiniBand port counters
(``gpuscope_ib_transmit_bytes_total``, ``_receive_bytes_total``, ``_transmit_wait_total``)
and link-rate gauge included, read on every scrape as the agent's IB source is, in scrape
order until the store's own daily compaction sorts closed days -- with its inventory every
6 hours and the store's hourly maintenance. Nothing is written by SQL.

Measured on a read-only copy, each N times (min/median/p99), at the history's end:
  quota      -- ``run_quota`` (7-day and 1-day windows): the scheduled run, which is also
                the full re-analysis
  bandwidth  -- ``run_bandwidth``: the scheduled run (the last 5-minute window)
  re-analysis-- ``bandwidth_history`` over every 5-minute window of the history (the
                5-minute roll-ups bound each port's traffic in each window; raw steps are
                read, 48 windows a query, only for the ports that could be hot there),
                alternated in the same loop with its reference: the same windows run
                one by one as the scheduled run does (all of them; past 48 windows, a
                spread sample of 24, scaled, and the row says so)
The rows in the range (raw IB samples) are counted and named, and how many ports' raw
steps the bound left to read. Times are wall-clock seconds at
DuckDB's default threads.

Run: .venv/bin/python bench/quota_bandwidth.py [--quick]
(or `python -m bench --only quota_bandwidth`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import peak
from bench.figure import Figure, Reference, print_figures
from bench.history import History, chosen_size, rows_between
from bench.history import history as get_history
from bench.timing import time_alternating
from gpuscope.analytics.detectors.bandwidth import run_bandwidth
from gpuscope.analytics.detectors.bandwidth_history import (
    CHUNK_WINDOWS,
    bandwidth_history,
    candidate_links,
)
from gpuscope.analytics.queueing.quota import run_quota
from gpuscope.collector.storage.store import Store
from gpuscope.core.collector_settings import CollectorSettings
from gpuscope.core.settings import AnalyticsSettings

IB = (
    "gpuscope_ib_transmit_bytes_total",
    "gpuscope_ib_receive_bytes_total",
    "gpuscope_ib_transmit_wait_total",
    "gpuscope_ib_port_rate_bytes_per_second",
)
WINDOW = timedelta(minutes=5)
#: past this many windows, the one-by-one reference runs a spread sample and scales it
ALL_WINDOWS_UP_TO = 48
SAMPLE_WINDOWS = 24


#: the memory limit the CLI and the collector open the database with
LIMIT = CollectorSettings().db_memory_limit


def full_once(db: str, start: datetime, end: datetime, memory_limit: str | None = None) -> str:
    """One full re-analysis on ``db`` (read-only), for bench/peak.py's own process, with
    DuckDB's ``memory_limit`` (None: its default, 80 % of RAM)."""
    with Store.open(Path(db), read_only=True, memory_limit=memory_limit) as store:
        con = store.cursor()
        hist = bandwidth_history(con, start, end, AnalyticsSettings())
        con.close()
    return f"{sum(bool(p) for _, p in hist)} windows with hot ports"


def measure(h: History, runs: int) -> dict[str, object]:
    cfg = AnalyticsSettings()
    start, end = h.start, h.end
    windows = int((end - start) / WINDOW)
    if windows <= ALL_WINDOWS_UP_TO:
        ends = [start + WINDOW * (k + 1) for k in range(windows)]
    else:
        sample = SAMPLE_WINDOWS if h.size.gpus < 10_000 else SAMPLE_WINDOWS // 3
        ends = [start + WINDOW * ((k + 1) * windows // sample) for k in range(sample)]
    scale = windows / len(ends)
    with tempfile.TemporaryDirectory(prefix="gpuscope-qb-") as tmp:
        store = Store.open(h.copy_to(Path(tmp)), read_only=True, memory_limit=LIMIT)
        try:
            ib_raw = rows_between(store, "samples", IB, start, end)
            last = end - WINDOW - timedelta(minutes=2)
            last_raw = rows_between(store, "samples", IB, last, end)
            con = store.cursor()
            chosen = candidate_links(con, start, end, cfg)
            ports = con.execute(
                "SELECT count(*) FROM series WHERE metric = ?", [IB[-1]]
            ).fetchall()[0][0]
            bw = time_alternating(lambda: run_bandwidth(con, end, cfg), n=runs, warmup=1)
            q7 = time_alternating(lambda: run_quota(con, end, cfg), n=runs, warmup=1)
            q1 = time_alternating(
                lambda: run_quota(con, end, cfg, window=timedelta(days=1)), n=runs
            )
            full = time_alternating(
                lambda: bandwidth_history(con, start, end, cfg),
                reference=lambda: [run_bandwidth(con, t, cfg) for t in ends],
                n=1 if h.size.gpus >= 10_000 else max(2, runs // 2),
            )
            con.close()
            alone = (
                None
                if h.size.gpus >= 10_000
                else peak.measure(full_once, str(store.path), start, end)
            )
            bounded = peak.measure(full_once, str(store.path), start, end, LIMIT)
        finally:
            store.close()
    hist = full.result
    assert full.reference is not None
    return {
        "bandwidth": bw.product,
        "hot_ports": bw.result.summary.get("hot_ports"),
        "quota7": q7.product,
        "quota_findings": len(q7.result.findings),
        "quota1": q1.product,
        "history": full.product,
        "peak": alone,
        "bounded": bounded,
        "one_by_one": full.reference.scaled(scale),
        "windows": windows,
        "sampled": len(ends),
        "hot_windows": sum(bool(p) for _, p in hist),
        "ib_raw": ib_raw,
        "read_pairs": sum(len(v) for v in chosen.values()),
        "all_pairs": ports * -(-windows // CHUNK_WINDOWS),
        "last_raw": last_raw,
    }


def run(quick: bool = False) -> list[Figure]:
    """Quota and bandwidth on the shared history (quick: 3 h of 48 GPUs; default 1 d of 104)."""
    h = get_history(chosen_size(quick))
    r = measure(h, 3 if quick else 2 if h.size.gpus >= 10_000 else 7)
    what = h.size.label()
    big = h.size.gpus >= 10_000
    windows, sampled = r["windows"], r["sampled"]
    how = (
        f"all {windows:,} windows one by one"
        if sampled == windows
        else f"{windows:,} windows one by one, estimated from {sampled} spread over them"
    )
    read, every = int(r["read_pairs"]), int(r["all_pairs"])  # type: ignore[call-overload]
    share = 100 * read / max(1, every)
    return [
        Figure.timed(
            f"quota, {what}: scheduled run (7-day window)", r["quota7"], "s",  # type: ignore[arg-type]
            notes=f"the full re-analysis is the same query; {r['quota_findings']} findings",
        ),
        Figure.timed("same: 1-day window", r["quota1"], "s"),  # type: ignore[arg-type]
        Figure.timed(
            f"bandwidth (IB, NVLink, PCIe), {what}: scheduled run (last 5 minutes)",
            r["bandwidth"], "s",  # type: ignore[arg-type]
            notes=f"IB counters ingested every {h.size.step_s} s; reads {r['last_raw']:,} raw "
            f"IB samples (window and 2-minute look-back); {r['hot_ports']} hot ports",
        ),
        Figure.timed(
            f"bandwidth, {what}: full re-analysis (every 5-minute window; the roll-ups bound "
            "each port, raw steps read 48 windows a query for the ports that could be hot)",
            r["history"], "s",  # type: ignore[arg-type]
            reference=Reference.timed(how, r["one_by_one"], "s"),  # type: ignore[arg-type]
            notes=f"the range holds {r['ib_raw']:,} raw IB samples; raw steps read for "
            f"{r['read_pairs']:,} of {r['all_pairs']:,} (port, 48-window chunk) pairs "
            f"({share:.0f} %); {r['hot_windows']} "
            "windows with hot ports; reference alternated in the same loop",
            key=big,
            aim="60 s at 10,000 GPUs" if big else None,
        ),
        *peak.rss_figures(r["peak"], r["bounded"], LIMIT, big=big),  # type: ignore[arg-type]
    ]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    print_figures(run(ap.parse_args().quick))


if __name__ == "__main__":
    main()
