"""The long-running service, assembled at the top: the collector plus the layers above it.

docs/design.md: layers point one way (actions -> analytics -> collector), so the only place that
wires them all into one process is here, beside the CLI: the collector's jobs, the
analytics job (every detector; findings stored, headline numbers as gauges; then the alerts
over them), the action policies, and the weekly report with its summary sent through the
alerts routes.

The what-if replay on the live store is gpuscope/service_whatif.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpuscope.analytics.base import Analysis
from gpuscope.analytics.inventory import InventoryReads
from gpuscope.analytics.runner import DETECTORS, load_scheduled, run_on_store
from gpuscope.collector.service import CollectorService
from gpuscope.collector.serving import run_collector
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings
from gpuscope.service_whatif import whatif_on_store

if TYPE_CHECKING:
    from gpuscope.actions.executor import OwnerNotice
    from gpuscope.alerts.engine import AlertsEngine
    from gpuscope.alerts.model import Severity
    from gpuscope.analytics.report.weekly import ReportResult

log = logging.getLogger(__name__)


def analytics_job(service: CollectorService) -> dict[str, Analysis]:
    """One run of every detector over the store; findings stored, gauges updated.

    The findings of every detector that ran are stored in one transaction (each detector's
    kinds its own: a kind the run no longer reports is resolved only by its detector's run),
    not one a detector: ~9 ms of CPU each on a small store (issue 39); the idle detector,
    which saves its state, leaves its findings to that transaction too (``record=False``).
    A detector that fails is counted and leaves its kinds' findings as they were. The
    analyses that state no ``data_until`` of their own share one read of it."""
    settings = service.settings
    done: dict[str, Analysis] = {}
    at = datetime.fromtimestamp(service.clock(), UTC)
    newest: dict[datetime, str | None] = {}  # the data's end, read once for the run
    inventory = InventoryReads()  # the state at `at`, read once for the run
    for name in DETECTORS:
        started = time.perf_counter()
        try:
            ran = run_on_store(
                service.store, at, settings, [name], persist=True, record=False,
                newest=newest, inventory=inventory,
            )  # fmt: skip
            result = ran[name]
        except Exception:
            service.metrics.job_errors.labels(f"analytics-{name}").inc()
            log.exception("detector failed detector=%s", name)
            continue
        service.metrics.analytics.update({name: result})
        service.metrics.analytics_seconds.labels(name).set(time.perf_counter() - started)
        done[name] = result
    if done:
        findings = [f for result in done.values() for f in result.findings]
        kinds = [k for result in done.values() for k in result.kinds]
        service.store.record_findings(findings, at, kinds=kinds)
    return done


def add_alerts(service: CollectorService) -> AlertsEngine | None:
    """The alerts engine (None when ``alerts.enabled`` is false) and its API routes.

    Built at start-up, so a bad alerts config or a missing secret stops the service with
    one line instead of failing on every run.
    """
    from gpuscope.alerts.api import alerts_router
    from gpuscope.alerts.config import load_alerts_config
    from gpuscope.alerts.engine import AlertsEngine

    engine = None
    if service.settings.alerts.enabled:
        config = load_alerts_config(service.settings.alerts.config_file)
        engine = AlertsEngine(
            service.store, config, clock=service.clock, registry=service.metrics.registry
        )
    service.routers.append(partial(alerts_router, service.store, engine, service.clock))
    return engine


def alerts_job(service: CollectorService, engine: AlertsEngine | None) -> None:
    """Alerts over the findings just stored; a failing run is counted, never fatal."""
    if engine is None:
        return
    try:
        engine.run()
    except Exception:
        service.metrics.job_errors.labels("alerts").inc()
        log.exception("alerts run failed")


def scheduled_run(service: CollectorService, engine: AlertsEngine | None) -> None:
    """The scheduled run: the detectors, then the alert rules over what they stored, on
    ``collector.job_db_threads`` of DuckDB's threads (its queries are small: a second
    thread costs more CPU than it saves time; gpuscope/collector/storage/thread_scope.py)."""
    with service.store.thread_scope.lowered(service.settings.collector.job_db_threads):
        analytics_job(service)
        alerts_job(service, engine)


def add_analytics(service: CollectorService) -> None:
    minutes = service.settings.analytics.interval_minutes
    engine = add_alerts(service)
    load_scheduled()  # the detectors' imports at start, not in the first run

    service.scheduler.add_job(
        scheduled_run,
        "interval",
        args=(service, engine),
        minutes=minutes,
        id="analytics",
        max_instances=1,
        coalesce=True,
    )


class NoticeContext(Protocol):
    """What :class:`AlertsNotices` needs: the collector's service, or ``gpuscope act``'s
    settings, store and clock."""

    @property
    def settings(self) -> Settings: ...
    @property
    def store(self) -> Store: ...
    @property
    def clock(self) -> Callable[[], float]: ...


class AlertsNotices:
    """One-off messages through the alerts routes (their labels pick the receiver): the
    actions executor's warnings to a workload's owner (its
    :class:`~gpuscope.actions.executor.Notifier`), and each weekly report's summary and where the
    page
    is (a route matching ``kind="weekly_report"`` picks the chat channel)."""

    def __init__(self, service: NoticeContext) -> None:
        from gpuscope.alerts.config import load_alerts_config

        self._service = service
        self._config = load_alerts_config(service.settings.alerts.config_file)

    def _send(self, title: str, text: str, labels: dict[str, str], severity: Severity) -> bool:
        from gpuscope.alerts.model import Notice
        from gpuscope.alerts.notify import send_notice

        outcomes = send_notice(
            self._config,
            Notice(title, text, labels, severity),
            clock=self._service.clock,
            on_attempt=lambda a: self._service.store.record_deliveries([a]),
        )
        return any(o.ok for o in outcomes)

    def notify(self, notice: OwnerNotice) -> bool:
        return self._send(notice.title, notice.text, dict(notice.labels), "warning")

    def deliver_report(self, summary: str, html: Path) -> None:
        link = self._service.settings.report.dashboard_url
        text = f"{summary}\n\nReport: {html}" + (f"\nDashboards: {link}" if link else "")
        self._send("Weekly GPU utilization report", text, {"kind": "weekly_report"}, "info")


def add_actions(service: CollectorService, notices: AlertsNotices | None = None) -> None:
    """The action policies on their schedule, when ``actions.policy_file`` is set (the file
    is read now, so a malformed one stops the start with one line), and ``POST
    /api/v1/act`` (gpuscope/actions/api.py) for ``gpuscope act --collector``."""
    from gpuscope.actions.api import actions_router
    from gpuscope.actions.kube import ClusterClient, KubeError
    from gpuscope.actions.policy import Policy, load_policies
    from gpuscope.actions.runner import check_reservations, lift_when_bound, run_policies
    from gpuscope.core.errors import UserError

    cfg = service.settings.actions
    policies = [] if cfg.policy_file is None else load_policies(cfg.policy_file)
    try:
        client = ClusterClient.from_setting(service.settings.collector)
    except KubeError as exc:
        raise UserError(str(exc)) from None

    lock = threading.Lock()  # the schedule's runs and the API's (POST /api/v1/act)

    def job() -> None:
        at = datetime.fromtimestamp(service.clock(), UTC)
        with lock:
            run = run_policies(
                service.store, policies, service.settings, client=client,
                execute=cfg.execute and client is not None, at=at, notifier=notices,
            )  # fmt: skip
        for rec in run.records:
            service.metrics.actions.labels(rec.kind, rec.result, str(rec.dry_run).lower()).inc()

    def on_request(chosen: Sequence[Policy], execute: bool, at: datetime) -> dict[str, Any]:
        if execute and client is None:
            raise KubeError("execute needs a Kubernetes API; this collector has none")
        run = run_policies(
            service.store, chosen, service.settings, client=client, execute=execute, at=at,
            notifier=notices,
        )  # fmt: skip
        for rec in run.records:
            service.metrics.actions.labels(rec.kind, rec.result, str(rec.dry_run).lower()).inc()
        return run.as_json()

    service.routers.append(actions_router(on_request, service.clock, lock))
    if cfg.policy_file is None:  # no schedule; `gpuscope act --collector` may still run
        return
    service.scheduler.add_job(
        job, "interval", minutes=cfg.interval_minutes, id="actions", max_instances=1,
        coalesce=True,
    )  # fmt: skip

    def lift() -> None:  # a reservation's pod bound: lift its taint now, not next run
        at = datetime.fromtimestamp(service.clock(), UTC)
        with lock:
            recs = lift_when_bound(
                service.store, policies, service.settings, client=client, at=at, notifier=notices
            )
        for rec in recs:
            service.metrics.actions.labels(rec.kind, rec.result, "false").inc()

    def check_at_start() -> None:  # a reservation left by the previous process: looked
        # at now, not at the first run of the policies (up to their interval later)
        at = datetime.fromtimestamp(service.clock(), UTC)
        with lock:
            recs = check_reservations(
                service.store, policies, service.settings, client=client, at=at,
                notifier=notices,
            )  # fmt: skip
        for rec in recs:
            service.metrics.actions.labels(rec.kind, rec.result, "false").inc()
        log.info("reservations checked at start lifted=%d", len(recs))

    if cfg.execute and client is not None:
        service.scheduler.add_job(
            lift, "interval", seconds=service.settings.collector.scrape_interval_seconds,
            id="actions-lift", max_instances=1, coalesce=True,
        )  # fmt: skip
        # once, as soon as the scheduler starts (whenever that is: no misfire deadline)
        service.scheduler.add_job(
            service._guarded("actions-start", check_at_start), id="actions-start",
            next_run_time=datetime.now(UTC), misfire_grace_time=None,
        )  # fmt: skip


#: Delivers a written report: its Markdown summary and the HTML file (a chat notifier).
Deliver = Callable[[str, Path], None]


def report_job(service: CollectorService, deliver: Deliver | None = None) -> ReportResult:
    """Write last week's report from the live store, then hand it to ``deliver``."""
    # imported here: the report's charts (matplotlib) are not needed until the first one
    from gpuscope.analytics.report.weekly import weekly_report

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


def extend_service(service: CollectorService, deliver: Deliver | None = None) -> None:
    """Everything above the collector: analytics (and the alerts after each run), the
    actions that read their findings, the weekly report and the what-if replay API."""
    # the API's routers (FastAPI) are imported here, where they are added: ``gpuscope
    # demo`` runs the analytics without the API, and without FastAPI's memory (issue 39)
    from gpuscope.analytics.api import analytics_router
    from gpuscope.analytics.idle_whatif.api import idle_whatif_router
    from gpuscope.collector.http_api.api_topology import topology_router

    service.whatif = whatif_on_store(service.store, service.settings, service.clock)
    service.expensive_routers.append(
        analytics_router(service.store, service.settings, service.clock)
    )
    # the idle-threshold replay reads the whole range: gated as the other expensive reads
    service.expensive_routers.append(
        idle_whatif_router(service.store, service.settings, service.clock)
    )
    service.routers.append(
        partial(topology_router, lambda: service.metrics.analytics.latest("topology"))
    )
    add_analytics(service)
    notices = AlertsNotices(service) if service.settings.alerts.enabled else None
    add_actions(service, notices)
    if deliver is None and notices is not None:
        deliver = notices.deliver_report
    add_report(service, deliver)


def run_service(settings: Settings, deliver: Deliver | None = None) -> int:
    """``gpuscope collector``: the collector with analytics, alerts, actions and the weekly
    report on its schedule; ``deliver`` overrides where each report's summary goes."""
    preflight(settings)
    return run_collector(settings, extend=lambda service: extend_service(service, deliver))


def preflight(settings: Settings) -> None:
    """Read the alerts config (its receivers' secrets resolved) and the policy file before
    anything is created: a missing secret or a bad file is one line with no database file
    left behind (the service reads them again when it builds the engine and the jobs)."""
    from gpuscope.actions.policy import load_policies
    from gpuscope.alerts.config import load_alerts_config
    from gpuscope.alerts.notifiers import build_notifier

    if settings.alerts.enabled:
        for receiver in load_alerts_config(settings.alerts.config_file).receivers:
            build_notifier(receiver)  # resolves its secrets: ConfigError when one is missing
    if settings.actions.policy_file is not None:
        load_policies(settings.actions.policy_file)
