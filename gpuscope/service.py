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


def add_actions(service: CollectorService) -> None:
    """The action policies on their schedule, when ``actions.policy_file`` is set. The file
    is read now, so a malformed one stops the start with one line."""
    from actions.kube import ClusterClient, KubeError
    from actions.policy import load_policies
    from actions.runner import run_policies
    from gpuscope.errors import UserError

    cfg = service.settings.actions
    if cfg.policy_file is None:
        return
    policies = load_policies(cfg.policy_file)
    try:
        client = ClusterClient.from_setting(service.settings.collector.kubernetes)
    except KubeError as exc:
        raise UserError(str(exc)) from None

    def job() -> None:
        at = datetime.fromtimestamp(service.clock(), UTC)
        run = run_policies(
            service.store, policies, service.settings, client=client,
            execute=cfg.execute and client is not None, at=at,
        )  # fmt: skip
        for rec in run.records:
            service.metrics.actions.labels(rec.kind, rec.result, str(rec.dry_run).lower()).inc()

    service.scheduler.add_job(
        job, "interval", minutes=cfg.interval_minutes, id="actions", max_instances=1,
        coalesce=True,
    )  # fmt: skip


def extend_service(service: CollectorService) -> None:
    """Everything above the collector: analytics, then the actions that read its findings."""
    add_analytics(service)
    add_actions(service)


def run_service(settings: Settings) -> int:
    """``gpuscope collector``: the collector with analytics and actions on its schedule."""
    return run_collector(settings, extend=extend_service)
