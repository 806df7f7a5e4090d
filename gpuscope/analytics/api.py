"""The analyses the CLI runs inside a live collector: ``GET /api/v1/analyze`` and
``GET /api/v1/report/weekly``.

DuckDB admits one process on a file, and the collector is it: ``gpuscope analyze`` and
``gpuscope report weekly`` on the database a collector holds used to be refused, and
stopping the collector for them left a gap in its data. The CLI hands them to the collector
instead (gpuscope/cli/beside.py), which runs the same code on its own store through a read
cursor (nothing is written: ``persist=False``, as the CLI's own run), beside its scrapes.
The answers carry what the CLI needs to print exactly what a local run prints: each
analysis's findings and summary, and the report's files (the CLI writes them into its own
``--out`` folder, swapped in whole). ``GET /api/v1/whatif``
(gpuscope/collector/http_api/api_whatif.py)
does the same for ``gpuscope whatif --db``.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query

from gpuscope.analytics.runner import DETECTORS, analysis_time, as_json, newest_data, run_on_store
from gpuscope.collector.http_api.api_whatif import check_week
from gpuscope.collector.storage.store import Store
from gpuscope.core.errors import UserError
from gpuscope.core.settings import Settings
from gpuscope.core.timefmt import FIRST_YEAR, LAST_YEAR, rfc3339

log = logging.getLogger(__name__)

What = Literal["idle", "fragmentation", "quota", "bandwidth", "consolidation", "topology", "all"]
#: The longest report link the CLI may ask to be written into the summary.
MAX_LINK = 4096


def _parse_at(text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise HTTPException(400, "at: expected a time like 2026-11-16T09:00:00Z") from None
    at = at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC)
    if not FIRST_YEAR <= at.year <= LAST_YEAR:
        raise HTTPException(400, f"at: expected a time between {FIRST_YEAR} and {LAST_YEAR}")
    return at


def analyze_on_store(
    store: Store, settings: Settings, what: str, at: datetime | None, now: datetime
) -> dict[str, Any]:
    """``gpuscope analyze WHAT --db`` on the live store, as of ``at`` (else the data-age
    rule at ``now``): ``{"at", "note", "analyses": {name: {"findings", "summary"}}}``."""
    note = None
    if at is None:
        cur = store.cursor()
        try:
            newest = newest_data(cur)
        finally:
            cur.close()
        at, note = analysis_time(newest, now, settings.collector.scrape_interval_seconds)
    which = list(DETECTORS) if what == "all" else [what]
    analyses = run_on_store(store, at, settings, which, persist=False)
    return {
        "at": rfc3339(at),
        "note": note,
        "analyses": {name: as_json({name: a}) for name, a in analyses.items()},
    }


def report_on_store(
    store: Store, settings: Settings, week_label: str, link: str | None, now: datetime
) -> dict[str, Any]:
    """``gpuscope report weekly --db`` on the live store: the report of ``week_label`` as
    files (base64, path relative to the week's folder; ``summary.md`` names ``link``), the
    chat summary and the cluster table, for the CLI to write and print."""
    from gpuscope.analytics.report.data import build_report
    from gpuscope.analytics.report.week import Week
    from gpuscope.analytics.report.weekly import report_files, report_json

    week = Week.parse(week_label)
    week.check_over(now)
    cur = store.cursor()
    try:
        report = build_report(cur, week, settings, now=now)
    finally:
        cur.close()
    files, summary = report_files(report, Path(link) if link else None)
    log.info("weekly report served week=%s", week.label)
    return {
        **report_json(report),
        "summary": summary,
        "files": {name: base64.b64encode(data).decode() for name, data in files.items()},
    }


def analytics_router(
    store: Store, settings: Settings, clock: Callable[[], float]
) -> Callable[[list[Any], list[Any]], APIRouter]:
    """The routes, built with the collector's (reader, writer) token checks: reading only."""

    def make(reader: list[Any], writer: list[Any]) -> APIRouter:
        del writer
        router = APIRouter(tags=["analytics"])

        @router.get("/api/v1/analyze", dependencies=list(reader))
        def analyze(what: What, at: Annotated[str | None, Query(max_length=64)] = None) -> Any:
            """The analysis ``gpuscope analyze WHAT --db PATH --at AT`` prints, run on the
            collector's store (without ``at``: now, or where the data ends, with ``note``)."""
            when = _parse_at(at) if at is not None else None
            now = datetime.fromtimestamp(clock(), UTC)
            try:
                return analyze_on_store(store, settings, what, when, now)
            except UserError as exc:
                raise HTTPException(400, str(exc).splitlines()[0]) from None

        @router.get("/api/v1/report/weekly", dependencies=list(reader))
        def report_weekly(
            week: Annotated[str, Query(max_length=16)],
            link: Annotated[str | None, Query(max_length=MAX_LINK)] = None,
        ) -> Any:
            """The weekly report of ``week`` (YYYY-Www, over) as ``gpuscope report weekly``
            writes it: its files (base64), the chat summary (naming ``link`` as the HTML's
            place), the cluster table and the notes."""
            check_week(week)
            if not FIRST_YEAR <= int(week[:4]) <= LAST_YEAR:
                raise HTTPException(400, f"week: expected a year {FIRST_YEAR}..{LAST_YEAR}")
            now = datetime.fromtimestamp(clock(), UTC)
            try:
                return report_on_store(store, settings, week, link, now)
            except UserError as exc:
                raise HTTPException(400, str(exc).splitlines()[0]) from None

        return router

    return make
