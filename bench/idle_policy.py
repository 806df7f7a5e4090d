"""Benchmark: ``gpuscope whatif idle``, the whole ladder, on a history made through the
ingest path (bench/history.py, the history the idle detector's benchmark reads).

One replay is what the CLI runs with its defaults: the seven idle thresholds (15 to 1440
minutes) and six time limits (8 to 168 hours) of the ladders, and the configured points
(the idle detector's window and session age: no policy file), over the history's last
7 days (all of it when shorter), with ``collector.db_memory_limit`` as the CLI opens the
database. Measured twice:

  interactive  -- as shipped: the interactive sessions (the scenario's notebooks);
  every        -- ``--all-workloads``: every GPU pod replayed, the heaviest case (every
                  GPU's week of 5-minute buckets cut into pieces, judged and run-length
                  encoded), an upper bound on a cluster of notebooks only.

Time: the median of N runs in this process; peak RSS: one run in a process of its own
(bench/peak.py).

10,000 GPUs x 7 days (:data:`WEEK_10K`, measured after the default history): the replay
reads the 5-minute roll-ups (and raw samples past their frontier), so a history sampled
every 300 s instead of 15 s gives it the same roll-up rows to read at a twentieth of the
build (its last hour has 12 raw samples a series instead of 240); vectorised but its last
hour, as the large history. ``GPUSCOPE_BENCH_HISTORY=large`` (``--large``) measures the
15 s one instead.

Run: .venv/bin/python bench/idle_policy.py [--quick] [--nodes N --days D --step S]
(or `python -m bench --only idle_policy`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import peak
from bench.figure import Figure, print_figures
from bench.history import History, HistorySize, chosen_size
from bench.history import history as get_history
from bench.timing import time_alternating
from gpuscope.analytics.idle_whatif.figures import idle_whatif
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import CollectorSettings, Settings

#: the memory limit the CLI opens the database with
LIMIT = CollectorSettings().db_memory_limit
#: 10,000 GPUs x 7 days sampled every 300 s: the roll-up rows a 15 s history has (the
#: replay reads those), built in a twentieth of the time
WEEK_10K = HistorySize(nodes=1250, days=7.0, step_s=300, tail_s=3600)


def _range(h: History) -> tuple[datetime, datetime]:
    end = h.end.replace(tzinfo=None)
    return max(h.start.replace(tzinfo=None), end - timedelta(days=7)), end


def once(db: str, start: datetime, end: datetime, every: bool, memory_limit: str) -> str:
    """One replay of the whole ladder on ``db`` (read-only), for bench/peak.py."""
    with Store.open(Path(db), read_only=True, memory_limit=memory_limit) as store:
        out = idle_whatif(store.cursor(), start, end, Settings(), every=every)
    return describe(out)


def describe(out: dict[str, object]) -> str:
    rec = out["recommendation"]
    ladder = len(out["thresholds"]) + len(out["time_limits"])  # type: ignore[arg-type]
    return (
        f"{out['sessions']:,} sessions, {out['gpu_hours_held']:,.0f} GPU-hours held, "
        f"{ladder} points; recommended {rec['idle_minutes']} min"  # type: ignore[index]
    )


def measure(h: History, runs: int) -> list[Figure]:
    start, end = _range(h)
    big = h.size.gpus >= 10_000
    figures = []
    with tempfile.TemporaryDirectory(prefix="gpuscope-idle-policy-") as tmp:
        db = h.copy_to(Path(tmp))
        for every in (False, True):
            what = "every GPU workload (--all-workloads)" if every else "interactive sessions"
            bounded = peak.measure(once, str(db), start, end, every, LIMIT)
            with Store.open(db, read_only=True, memory_limit=LIMIT) as store:
                timed = time_alternating(
                    lambda every=every, store=store: idle_whatif(  # type: ignore[misc]
                        store.cursor(), start, end, Settings(), every=every
                    ),
                    n=runs,
                )
            label = f"idle-policy what-if, {h.size.label()}: whole ladder, {what}"
            figures += [
                Figure.timed(
                    label,
                    timed.product,
                    "s",
                    aim="60 s at 10,000 GPUs x 7 days" if big else None,
                    notes=f"{describe(timed.result)}; 13 ladder points and 2 configured",
                    key=big,
                ),
                Figure(
                    f"same, peak RSS with collector.db_memory_limit ({LIMIT})",
                    bounded.rss_bytes / 2**30,
                    "GiB",
                    aim="4 GB at 10,000 GPUs" if big else None,
                    notes=peak.figure_notes(bounded),
                    key=big,
                ),
            ]
    return figures


def run(quick: bool = False, size: HistorySize | None = None) -> list[Figure]:
    """The whole ladder on the shared history (quick: 3 h of 48 GPUs; default 1 d of 104,
    then :data:`WEEK_10K`, unless the chosen history is already 10,000 GPUs)."""
    if size is not None or quick:
        return measure(get_history(size or chosen_size(quick)), 3)
    chosen = chosen_size(False)
    sizes = [chosen] if chosen.gpus >= 10_000 else [chosen, WEEK_10K]
    figures: list[Figure] = []
    for s in sizes:
        figures += measure(get_history(s), 3 if s.gpus >= 10_000 else 5)
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--nodes", type=int, help="8-GPU nodes of the history (with --days)")
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--step", type=int, default=15, help="seconds between samples")
    args = ap.parse_args()
    size = None
    if args.nodes:
        tail = 3600 if args.days * 86_400 > 3600 else None
        size = HistorySize(nodes=args.nodes, days=args.days, step_s=args.step, tail_s=tail)
    print_figures(run(args.quick, size))


if __name__ == "__main__":
    main()
