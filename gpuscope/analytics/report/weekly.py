"""The weekly utilization report end to end: numbers, page, summary, tables on disk.

``<out>/<YYYY-Www>/`` gets ``report.html`` (self-contained), ``summary.md`` (for chat) and
``tables/<name>.csv`` and ``.parquet`` for every table in the page. The folder is written
beside its final name and swapped in whole, so a reader (or a web server) never sees half
a report, and a failed run leaves the previous one as it was.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb

from gpuscope.analytics.report.data import WeeklyReport, build_report
from gpuscope.analytics.report.html import render_html
from gpuscope.analytics.report.markdown import render_markdown
from gpuscope.analytics.report.week import Week
from gpuscope.core.errors import UserError
from gpuscope.core.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReportResult:
    """What a run produced: the chat summary and where the files are."""

    summary: str
    html: Path
    directory: Path
    report: WeeklyReport


def _write(report: WeeklyReport, final: Path) -> None:
    staging = final.with_name(f".{final.name}.partial-{os.getpid()}")
    if staging.exists():
        shutil.rmtree(staging)
    tables = staging / "tables"
    tables.mkdir(parents=True)
    for name, df in report.tables.items():
        df.write_csv(tables / f"{name}.csv")
        df.write_parquet(tables / f"{name}.parquet", compression="zstd")
    (staging / "report.html").write_text(render_html(report), encoding="utf-8")
    summary = render_markdown(report, final / "report.html")
    (staging / "summary.md").write_text(summary, encoding="utf-8")
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    if final.exists():
        final.rename(old)
    staging.rename(final)
    if old.exists():
        shutil.rmtree(old)


def weekly_report(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    *,
    now: datetime,
    week: Week | None = None,
    out_dir: Path | None = None,
) -> ReportResult:
    """Write the report of ``week`` (default: the last complete week before ``now``).

    ``con`` is a cursor on the store; nothing in the database is changed. ``out_dir``
    defaults to ``report.out_dir`` of the settings.
    """
    week = week or Week.last_complete(now)
    out = Path(out_dir if out_dir is not None else settings.report.out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create report folder {out}: {exc.strerror}") from None
    report = build_report(con, week, settings, now=now)
    final = out / week.label
    try:
        _write(report, final)
    except OSError as exc:
        raise UserError(f"cannot write the report to {final}: {exc.strerror}") from None
    html = final / "report.html"
    log.info("weekly report written week=%s path=%s", week.label, html)
    return ReportResult(render_markdown(report, html), html, final, report)
