"""The long-running service, assembled at the top: the collector plus the layers above it.

DESIGN.md: layers point one way (actions -> analytics -> collector), so the only place that
wires them all into one process is here, beside the CLI. Today: the collector's jobs and
the analytics job, which runs every detector on the collector's schedule, stores their
findings and publishes their headline numbers as gauges.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from analytics.base import Analysis
from analytics.report import ReportResult, weekly_report
from analytics.runner import DETECTORS, run_on_store
from collector.service import CollectorService, run_collector
from gpuscope.settings import Settings

log = logging.getLogger(__name__)


def analytics_job(service: CollectorService) -> dict[str, Analysis]:
    """One run of every detector over the store; findings stored, gauges updated."""
    settings = service.settings
    done: dict[str, Analysis] = {}
    at = datetime.fromtimestamp(service.clock(), UTC)
    for name in DETECTORS:
        started = time.perf_counter()
        try:
            result = run_on_store(service.store, at, settings, [name], persist=True)[name]
        except Exception:
            service.metrics.job_errors.labels(f"analytics-{name}").inc()
            log.exception("detector failed detector=%s", name)
            continue
        service.store.record_findings(result.findings, at, kinds=result.kinds)
        service.metrics.analytics.update({name: result})
        service.metrics.analytics_seconds.labels(name).set(time.perf_counter() - started)
        done[name] = result
    return done


def add_analytics(service: CollectorService) -> None:
    minutes = service.settings.analytics.interval_minutes
    service.scheduler.add_job(
        lambda: analytics_job(service),
        "interval",
        minutes=minutes,
        id="analytics",
        max_instances=1,
        coalesce=True,
    )


#: Delivers a written report: its Markdown summary and the HTML file (a chat notifier).
Deliver = Callable[[str, Path], None]


def report_job(service: CollectorService, deliver: Deliver | None = None) -> ReportResult:
    """Write last week's report from the live store, then hand it to ``deliver``."""
    now = datetime.fromtimestamp(service.clock(), UTC)
    cur = service.store.cursor()
    try:
        result = weekly_report(cur, service.settings, now=now)
    finally:
        cur.close()
    if deliver is not None:
        deliver(result.summary, result.html)
    return result


def add_report(service: CollectorService, deliver: Deliver | None = None) -> None:
    """The weekly report on ``report.schedule_day`` at ``report.schedule_hour`` (UTC)."""
    rs = service.settings.report
    if not rs.schedule_enabled:
        return

    def run() -> None:
        try:
            report_job(service, deliver)
        except Exception:
            service.metrics.job_errors.labels("report").inc()
            log.exception("weekly report failed")

    service.scheduler.add_job(
        run,
        "cron",
        day_of_week=rs.schedule_day,
        hour=rs.schedule_hour,
        minute=0,
        id="report",
        max_instances=1,
        coalesce=True,
        misfire_grace_time=3600,
    )


def run_service(settings: Settings, deliver: Deliver | None = None) -> int:
    """``gpuscope collector``: the collector with the analytics and the weekly report on
    its schedule; ``deliver`` sends each report on (a chat notifier, wired at assembly)."""

    def extend(service: CollectorService) -> None:
        add_analytics(service)
        add_report(service, deliver)

    return run_collector(settings, extend=extend)
