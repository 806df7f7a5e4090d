"""``gpuscope report weekly``: the weekly utilization report from a database file.

Kept apart from gpuscope/cli/main.py so the report's flags live beside the code that reads them.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuscope.cli.beside import add_collector_argument, beside, report_through
from gpuscope.core.settings import load_settings


def add_report_parser(sub: Any) -> None:
    """The ``report`` subcommand on the CLI's subparsers."""
    parent = sub.add_parser(
        "report", help="write the weekly utilization report (HTML, Markdown, CSV)"
    )
    # a subcommand, not a positional choice: `report weekly --help` then shows its own flags
    kinds = parent.add_subparsers(
        dest="what", required=True, metavar="{weekly}", parser_class=type(parent)
    )
    rep = kinds.add_parser("weekly", help="the report of one ISO week")
    rep.add_argument("--db", type=Path, metavar="PATH", help="a gpuscope DuckDB file (read-only)")
    rep.add_argument(
        "--out", type=Path, metavar="DIR", help="output folder (default report.out_dir)"
    )
    rep.add_argument(
        "--week",
        metavar="YYYY-Www",
        help="ISO week in UTC, e.g. 2025-W10 (default: the last complete week)",
    )
    rep.add_argument("--config", type=Path, help="YAML settings file (report:, analytics:)")
    rep.add_argument(
        "--json",
        action="store_true",
        help="print what was written (week, files, summary) as one JSON object",
    )
    add_collector_argument(rep)
    rep.add_argument(
        "--log-level",
        default=os.environ.get("GPUSCOPE_LOG_LEVEL", "INFO"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log verbosity (default INFO)",
    )
    rep.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=argparse.SUPPRESS,  # given or not, never hides the global flag
        help="log lines as text or JSON objects (default: the logging.format setting, text)",
    )


def cmd_report(args: argparse.Namespace) -> int:
    """Write the report and print its chat summary (which names the HTML file)."""
    from gpuscope.analytics.report.week import Week
    from gpuscope.cli.common import FIRST_YEAR, LAST_YEAR, open_store
    from gpuscope.core.errors import UserError

    settings = load_settings(args.config)
    week = Week.parse(args.week) if args.week else None
    if week is not None and not FIRST_YEAR <= week.year <= LAST_YEAR:
        raise UserError(f"--week {args.week}: expected a week between {FIRST_YEAR} and {LAST_YEAR}")
    now = datetime.now(UTC)
    if week is not None:
        week.check_over(now)  # before the report's folder is made
    db = args.db if args.db is not None else settings.collector.db
    collector = beside(args, settings, Path(db))
    if collector is not None:  # a running collector holds it: run there (cli/beside.py)
        label = (week or Week.last_complete(now)).label
        out_dir = Path(args.out if args.out is not None else settings.report.out_dir)
        return report_through(collector, label, out_dir, args.json)
    if not Path(db).exists():
        raise UserError(f"database {db} does not exist")
    # the report's modules (matplotlib, the templates: ~0.5 s of imports) only once the
    # inputs are good: a refused command answers in the time the settings take to load
    from gpuscope.analytics.report.weekly import weekly_report

    with open_store(db, memory_limit=settings.collector.db_memory_limit) as store:
        cur = store.cursor()
        try:
            result = weekly_report(cur, settings, now=now, week=week, out_dir=args.out)
        finally:
            cur.close()
    if args.json:
        print(json.dumps(_as_json(result), indent=2, default=str))
    else:
        print(result.summary, end="")
    return 0


def _as_json(result: Any) -> dict[str, Any]:
    """What ``--json`` prints: the week, the files written, the cluster table's numbers
    (metric -> this week, previous week, change) and the notes, for scripts."""
    report = result.report
    cluster = report.tables["cluster"].to_dicts() if "cluster" in report.tables else []
    return {
        "week": report.week.label,
        "directory": str(result.directory),
        "html": str(result.html),
        "files": sorted(str(p) for p in result.directory.iterdir() if p.is_file()),
        "cluster": {row.pop("metric"): row for row in cluster},
        "notes": list(report.notes),
        "summary": result.summary,
    }
