"""Benchmark: the weekly report, ``gpuscope report weekly``, on a history made through ingest.

The database is the shared benchmark history (bench/history.py): the simulated cluster's
agent series every 15 s through ``Store.append_cycle``, its inventory every 6 hours, and the
store's own maintenance (roll-ups, compaction). It ends at 00:00 UTC on Monday 2025-03-10,
so ISO week 2025-W10 has just closed; the default history holds that week's last day
(1 day of 104 GPUs), ``GPUSCOPE_BENCH_HISTORY=large`` all of it for 10,000 GPUs. The rows
say what the database held for the report's fortnight (the week and the week before, which
it compares with).

Measured on a copy of it:
  whole report -- the CLI's own command function (``gpuscope report weekly --db ... --out
                  ... --week 2025-W10 --config ...``, parsed by the CLI's parser): open the
                  database read-only, numbers, charts, HTML, Markdown, CSV and Parquet; the
                  first run on a fresh copy of the file, then N more (min/median/p99)
  numbers      -- ``build_report`` alone on an open cursor, N times
Times are wall-clock seconds.

Run: .venv/bin/python bench/report.py [--quick] (or `python -m bench --only report`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import peak
from bench.figure import Figure, print_figures
from bench.history import History, chosen_size, rows_between
from bench.history import history as get_history
from bench.timing import time_alternating, time_once
from gpuscope.analytics.report.data import build_report
from gpuscope.analytics.report.week import Week
from gpuscope.cli.main import build_parser
from gpuscope.cli.report import cmd_report
from gpuscope.collector.storage.store import Store
from gpuscope.core.collector_settings import CollectorSettings
from gpuscope.core.settings import Settings

WEEK = Week(2025, 10)
CONFIG = "report:\n  price_per_gpu_hour: 2.0\n"
READ = ("gpuscope_gpu_utilization_ratio", "gpuscope_ib_transmit_bytes_total",
        "gpuscope_ib_receive_bytes_total", "gpuscope_ib_port_rate_bytes_per_second")  # fmt: skip


#: the memory limit the CLI and the collector open the database with
LIMIT = CollectorSettings().db_memory_limit


def cli_report(db: Path, out: Path, config: Path) -> str:
    """``gpuscope report weekly`` as the CLI runs it after parsing; its printed summary."""
    args = build_parser().parse_args(
        ["report", "weekly", "--db", str(db), "--out", str(out), "--week", WEEK.label,
         "--config", str(config)]
    )  # fmt: skip
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = cmd_report(args)
    if code != 0:
        raise RuntimeError(f"gpuscope report weekly exited {code}")
    return printed.getvalue()


def report_once(db: Path, out: Path, config: Path) -> str:
    """The whole report once, for bench/peak.py's own process: its summary's first line."""
    return cli_report(db, out, config).strip().splitlines()[0].strip("* ")


def measure(h: History, runs: int) -> dict[str, object]:
    settings = Settings.model_validate({"report": {"price_per_gpu_hour": 2.0}})
    lo, hi = WEEK.previous().start, WEEK.end
    with tempfile.TemporaryDirectory(prefix="gpuscope-report-") as tmp:
        db = h.copy_to(Path(tmp))
        config = Path(tmp) / "gpuscope.yaml"
        config.write_text(CONFIG)
        out = Path(tmp) / "reports"
        with Store.open(db, read_only=True, memory_limit=LIMIT) as store:
            held = {t: rows_between(store, t, READ, lo, hi) for t in ("samples_5m", "samples")}
        first, summary = time_once(lambda: cli_report(db, out, config))
        alone = peak.measure(report_once, db, Path(tmp) / "reports-peak", config)
        again = time_alternating(lambda: cli_report(db, out, config), n=runs)
        with Store.open(db, read_only=True, memory_limit=LIMIT) as store:
            cur = store.cursor()
            now = WEEK.end + timedelta(hours=7)
            numbers = time_alternating(lambda: build_report(cur, WEEK, settings, now=now), n=runs)
            report = numbers.result
            cur.close()
        page = out / WEEK.label / "report.html"
        page_kb = page.stat().st_size / 1e3 if page.is_file() else 0.0
    return {
        "first": first,
        "peak": alone,
        "again": again.product,
        "numbers": numbers.product,
        "held": held,
        "page_kb": page_kb,
        "allocated": report.metric("allocated_gpu_hours"),
        "summary": summary,
    }


def run(quick: bool = False) -> list[Figure]:
    """The weekly report on the shared history (quick: 3 h of 48 GPUs; default 1 d of 104)."""
    h = get_history(chosen_size(quick))
    runs = 3 if quick else 2 if h.size.gpus >= 10_000 else 5
    m = measure(h, runs)
    held: dict[str, int] = m["held"]  # type: ignore[assignment]
    label = f"{WEEK.label} and the week before, database of {h.size.label()}"
    big = h.size.gpus >= 10_000
    notes = (
        f"the fortnight holds {held['samples_5m']:,} samples_5m rows and "
        f"{held['samples']:,} raw samples of utilization and IB series"
    )
    first: float = m["first"]  # type: ignore[assignment]
    return [
        Figure(
            f"weekly report (`gpuscope report weekly`), {label}: first run on a fresh copy",
            first, "s", aim="< 30 s at 10,000 GPUs" if big else None,
            notes=f"numbers, charts, HTML, Markdown, CSV and Parquet; {notes}", key=big,
        ),
        Figure.timed("same: again", m["again"], "s"),  # type: ignore[arg-type]
        Figure.timed(
            "same: the numbers alone (build_report)", m["numbers"], "s",  # type: ignore[arg-type]
            notes=f"{m['allocated']:,.0f} allocated GPU-hours",
        ),
        Figure(
            "same: peak RSS of the whole report in a process of its own (the CLI opens the "
            "database with collector.db_memory_limit)",
            m["peak"].rss_bytes / 2**30,  # type: ignore[attr-defined]
            "GiB",
            notes=peak.figure_notes(m["peak"]),  # type: ignore[arg-type]
            key=big,
        ),
    ]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    print_figures(run(ap.parse_args().quick))


if __name__ == "__main__":
    main()
