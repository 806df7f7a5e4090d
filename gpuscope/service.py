"""The long-running service, assembled at the top: the collector plus the layers above it.

DESIGN.md: layers point one way (actions -> analytics -> collector), so the only place that
wires them all into one process is here, beside the CLI. Today: the collector's jobs and
the analytics job, which runs every detector on the collector's schedule, stores their
findings and publishes their headline numbers as gauges.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from analytics.base import Analysis
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


def run_service(settings: Settings) -> int:
    """``gpuscope collector``: the collector with the analytics on its schedule."""
    return run_collector(settings, extend=add_analytics)
