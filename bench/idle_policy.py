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

10,000 GPUs x 7 days: the simulator's history of that size takes hours to build on 2 cores
(bench/history.py; ``GPUSCOPE_BENCH_HISTORY=large``, ``--large``, measures it when built),
so the default run measures :func:`synthetic`'s week instead: every GPU a notebook a day
(8 to 20 hours open, used for the first 1 to 7, busy in 60 % of those 5-minute buckets),
utilization every 300 s written by SQL into ``samples`` with its series and intervals, and
rolled up by the store's own ``apply_retention``. The replay reads the 5-minute roll-ups,
so a 15 s history of the same week gives it the same rows to read; every GPU is a session
here, the heaviest the shipped path meets. ``--nodes 1250 --days 7 --step 300`` builds
the simulator's week sampled every 300 s (:data:`WEEK_10K`) when there is time.

Run: .venv/bin/python bench/idle_policy.py [--quick] [--nodes N --days D --step S]
[--synthetic GPUS --days D]
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
from gpuscope.core.collector_settings import CollectorSettings
from gpuscope.core.settings import Settings

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


#: The synthetic week's sessions: each GPU hosts one notebook a day, open 8 to 20 hours,
#: used (busy in 60 % of its 5-minute buckets) for its first 1 to 7 hours, idle after.
SYNTH_SQL = """
WITH g AS (SELECT range AS g FROM range($gpus)),
sessions AS (
    SELECT g, k,
           $t0 + to_seconds(k * 86400 + hash(g, k, 1) % 14400) AS s,
           to_seconds(28800 + hash(g, k, 2) % 43200) AS open_for,
           to_seconds(3600 + hash(g, k, 3) % 21600) AS used_for
    FROM g, range($days) AS d(k)
)
"""


def synthetic(path: Path, gpus: int, days: int, end: datetime) -> tuple[int, int]:
    """A history for the replay alone, ``days`` days to ``end``: ``gpus`` GPUs'
    ``gpuscope_gpu_utilization_ratio`` every 300 s and the notebooks holding them (see
    :data:`SYNTH_SQL`), written by SQL into ``samples``, ``series`` and
    ``workload_intervals`` and rolled up by the store's own ``apply_retention``. Returns
    (samples, sessions)."""
    t0 = end - timedelta(days=days)
    params = {"gpus": gpus, "days": days, "t0": t0}
    with Store.open(path, memory_limit="3GB") as store:
        with store._transaction() as con:
            con.execute(
                "INSERT INTO series SELECT 1 + range, 'gpuscope_gpu_utilization_ratio', "
                "'gauge', 'node-' || (range // 8), CAST(range % 8 AS VARCHAR), "
                "'GPU-synth-' || range, '', NULL, NULL, NULL, NULL, NULL, "
                "map(['node', 'gpu', 'uuid'], ['node-' || (range // 8), "
                "CAST(range % 8 AS VARCHAR), 'GPU-synth-' || range]), $t0, $end, 0.01 "
                "FROM range($gpus)",
                {"gpus": gpus, "t0": t0, "end": end},
            )
            con.execute(
                SYNTH_SQL
                + """
INSERT INTO workload_intervals
SELECT 'research', 'nb-' || g || '-' || k, 'main', 'node-' || (g // 8),
       CAST(g % 8 AS VARCHAR), 'GPU-synth-' || g, 'interactive', 'research', true,
       'http://node-' || (g // 8) || ':9400/metrics', s, least(s + open_for, $end),
       CASE WHEN s + open_for < $end THEN s + open_for END
FROM sessions WHERE s < $end
""",
                {**params, "end": end},
            )
            con.execute(
                SYNTH_SQL
                + """,
steps AS (SELECT $t0 + to_seconds(range * 300) AS ts FROM range($steps))
INSERT INTO samples
SELECT 1 + g.g, st.ts,
       CASE WHEN x.s IS NOT NULL AND st.ts < x.s + x.used_for
                 AND hash(g.g, epoch(st.ts)) % 10 < 6 THEN 0.5 ELSE 0.01 END
FROM g CROSS JOIN steps AS st
LEFT JOIN sessions AS x ON x.g = g.g AND st.ts >= x.s AND st.ts < x.s + x.open_for
ORDER BY 1, 2
""",
                {**params, "steps": days * 288},
            )
        store.apply_retention(end + timedelta(minutes=10))
        store.checkpoint()
        cur = store.cursor()
        n = cur.execute("SELECT count(*) FROM samples").fetchall()[0][0]
        k = cur.execute("SELECT count(*) FROM workload_intervals").fetchall()[0][0]
        cur.close()
    return int(n), int(k)


def measure_synthetic(gpus: int, days: int, runs: int) -> list[Figure]:
    """The whole ladder on :func:`synthetic`'s history (a week and the look-back day)."""
    end = datetime(2025, 3, 10)
    with tempfile.TemporaryDirectory(prefix="gpuscope-idle-policy-") as tmp:
        db = Path(tmp) / "synthetic.duckdb"
        samples, sessions = synthetic(db, gpus, days + 1, end)
        start = end - timedelta(days=days)
        bounded = peak.measure(once, str(db), start, end, False, LIMIT)
        with Store.open(db, read_only=True, memory_limit=LIMIT) as store:
            timed = time_alternating(
                lambda: idle_whatif(store.cursor(), start, end, Settings()), n=runs
            )
    label = (
        f"idle-policy what-if, synthetic {days} d of {gpus:,} GPUs, every GPU a notebook a "
        "day (SQL-written samples every 300 s, rolled up by apply_retention): whole ladder"
    )
    notes = f"{describe(timed.result)}; {samples:,} samples, {sessions:,} sessions stored"
    return [
        Figure.timed(
            label,
            timed.product,
            "s",
            aim="60 s at 10,000 GPUs x 7 days",
            notes=notes,
            key=gpus >= 10_000,
        ),
        Figure(
            f"same, peak RSS with collector.db_memory_limit ({LIMIT})",
            bounded.rss_bytes / 2**30,
            "GiB",
            aim="4 GB at 10,000 GPUs",
            notes=peak.figure_notes(bounded),
            key=gpus >= 10_000,
        ),
    ]


def run(quick: bool = False, size: HistorySize | None = None) -> list[Figure]:
    """The whole ladder on the shared history (quick: 3 h of 48 GPUs; default 1 d of 104),
    then, unless the chosen history is already 10,000 GPUs or ``quick``, on
    :func:`synthetic`'s 10,000 GPUs x 7 days."""
    if size is not None or quick:
        return measure(get_history(size or chosen_size(quick)), 3)
    chosen = chosen_size(False)
    figures = measure(get_history(chosen), 3 if chosen.gpus >= 10_000 else 5)
    if chosen.gpus < 10_000:
        figures += measure_synthetic(10_000, 7, 3)
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--nodes", type=int, help="8-GPU nodes of the history (with --days)")
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--step", type=int, default=15, help="seconds between samples")
    ap.add_argument("--synthetic", type=int, metavar="GPUS", help="the SQL-written week only")
    args = ap.parse_args()
    if args.synthetic:
        print_figures(measure_synthetic(args.synthetic, int(args.days), 3))
        return
    size = None
    if args.nodes:
        tail = 3600 if args.days * 86_400 > 3600 else None
        size = HistorySize(nodes=args.nodes, days=args.days, step_s=args.step, tail_s=tail)
    print_figures(run(args.quick, size))


if __name__ == "__main__":
    main()
