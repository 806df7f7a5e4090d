"""The weekly utilization report end to end: numbers, page, summary, tables on disk.

``<out>/<YYYY-Www>/`` gets ``report.html`` (self-contained), ``summary.md`` (for chat) and
``tables/<name>.csv`` and ``.parquet`` for every table in the page. The folder is written
beside its final name and swapped in whole, so a reader (or a web server) never sees half
a report, and a failed run leaves the previous one as it was.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

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


def report_files(report: WeeklyReport, html: Path | None) -> tuple[dict[str, bytes], str]:
    """The report's files by path inside its week's folder (``report.html``, ``summary.md``
    naming ``html`` as the full report's place, ``tables/<name>.csv`` and ``.parquet``), and
    the chat summary: what a local run writes, and what the collector's API hands the CLI."""
    files: dict[str, bytes] = {}
    for name, df in report.tables.items():
        csv, parquet = io.BytesIO(), io.BytesIO()
        df.write_csv(csv)
        df.write_parquet(parquet, compression="zstd")
        files[f"tables/{name}.csv"] = csv.getvalue()
        files[f"tables/{name}.parquet"] = parquet.getvalue()
    files["report.html"] = render_html(report).encode()
    summary = render_markdown(report, html)
    files["summary.md"] = summary.encode()
    return files, summary


def write_folder(final: Path, files: Mapping[str, bytes]) -> None:
    """Write ``files`` (relative paths) beside ``final`` and swap the folder in whole, so a
    reader never sees half a report and a failure leaves the previous one as it was."""
    for rel in files:
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise UserError(f"refusing to write {rel!r} outside the report's folder")
    staging = final.with_name(f".{final.name}.partial-{os.getpid()}")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    for rel, data in files.items():
        path = staging / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    if final.exists():
        final.rename(old)
    staging.rename(final)
    if old.exists():
        shutil.rmtree(old)


def report_json(report: WeeklyReport) -> dict[str, Any]:
    """The report's week, cluster table (metric -> this week, previous week, change) and
    notes, as ``gpuscope report weekly --json`` prints them."""
    cluster = report.tables["cluster"].to_dicts() if "cluster" in report.tables else []
    return {
        "week": report.week.label,
        "cluster": {row.pop("metric"): row for row in cluster},
        "notes": list(report.notes),
    }


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
    html = final / "report.html"
    files, summary = report_files(report, html)
    try:
        write_folder(final, files)
    except OSError as exc:
        raise UserError(f"cannot write the report to {final}: {exc.strerror}") from None
    log.info("weekly report written week=%s path=%s", week.label, html)
    return ReportResult(summary, html, final, report)
