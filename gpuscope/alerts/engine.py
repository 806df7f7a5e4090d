"""The alerts job: evaluate, advance the lifecycle, route, deliver, remember.

Run once per analytics run by the assembled service (gpuscope/service.py). Everything it
remembers is in the store, written before anyone is notified (alert states) or once they
have been (group states), so a restart neither repeats a notification nor forgets an alert.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from prometheus_client import CollectorRegistry

from gpuscope.alerts.conditions import (
    data_view,
    evaluate_metric,
    evaluate_targets,
    metric_windows,
)
from gpuscope.alerts.config import AlertsConfig, FindingRule, MetricRule, TargetDownRule
from gpuscope.alerts.delivery import Deliverer
from gpuscope.alerts.lifecycle import advance, from_record, to_record
from gpuscope.alerts.matchers import parse_matchers
from gpuscope.alerts.metrics import AlertMetrics
from gpuscope.alerts.model import Alert, Attempt, Candidate, Notification, Outcome
from gpuscope.alerts.notifiers import Notifier, build_notifier
from gpuscope.alerts.routing import GroupState, inhibited, plan, silenced_by
from gpuscope.alerts.rules import SeriesWindow, finding_candidates
from gpuscope.collector.storage.store import Store

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    alerts: dict[str, Alert] = field(default_factory=dict)
    muted: set[str] = field(default_factory=set)
    notifications: list[Notification] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)


class AlertsEngine:
    def __init__(
        self,
        store: Store,
        config: AlertsConfig,
        *,
        notifiers: Mapping[str, Notifier] | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        client: httpx.Client | None = None,
        registry: CollectorRegistry | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.store, self.config, self.clock = store, config, clock
        self.rules = config.all_rules()
        if notifiers is None:  # secrets resolved now: a missing one stops start-up
            notifiers = {r.name: build_notifier(r, env) for r in config.receivers}
        self.notifiers = dict(notifiers)
        self.metrics = AlertMetrics(registry)
        self._attempts: list[Attempt] = []
        self.deliverer = Deliverer(config.delivery, client=client, clock=clock, sleep=sleep,
                                   on_attempt=self._attempted)  # fmt: skip
        self.inhibit_rules = config.inhibitions()
        self.send_resolved = {r.name: r.send_resolved for r in config.receivers}
        self.always = {r.name for r in config.receivers if r.type == "alertmanager"}

    def _attempted(self, a: Attempt) -> None:
        self._attempts.append(a)
        self.metrics.attempted(a)

    def close(self) -> None:
        self.deliverer.close()

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC).replace(tzinfo=None)

    # -- evaluation ---------------------------------------------------------------------------
    def evaluate(self, now: datetime) -> tuple[list[Candidate], set[str]]:
        """Candidates from every rule, and the rules that failed (their alerts are kept)."""
        finding_rules = [r for r in self.rules if isinstance(r, FindingRule)]
        failed: set[str] = set()
        out: list[Candidate] = []
        if finding_rules:
            try:
                out += finding_candidates(finding_rules, self.store.findings(open_only=True))
            except Exception:
                log.exception("finding rules failed")
                failed |= {r.name for r in finding_rules}
        metric_rules = [r for r in self.rules if isinstance(r, MetricRule)]
        cur = self.store.cursor()
        try:
            view = data_view(cur)  # fleet mode: judged at the newest bucket stored
            read: dict[int, list[SeriesWindow]] = {}
            try:  # every metric rule's windows in one statement (one a rule if it fails)
                windows = metric_windows(cur, metric_rules, now, view)
                read = {id(r): w for r, w in zip(metric_rules, windows, strict=True)}
            except Exception:
                log.warning("metric rules read together failed; each alone", exc_info=True)
            for rule in self.rules:
                try:
                    if isinstance(rule, MetricRule):
                        out += evaluate_metric(cur, rule, now, view, read.get(id(rule)))
                    elif isinstance(rule, TargetDownRule):
                        out += evaluate_targets(cur, rule, now)
                except Exception:
                    log.exception("alert rule failed rule=%s", rule.name)
                    failed.add(rule.name)
        finally:
            cur.close()
        for name in failed:
            self.metrics.rule_errors.labels(name).inc()
        return out, failed

    def _previous(self) -> dict[str, Alert]:
        out = {}
        for aid, rec in self.store.alert_states().items():
            try:
                out[aid] = from_record(rec)
            except (KeyError, ValueError, TypeError, AssertionError):
                log.warning("unreadable alert state dropped alert_id=%s", aid)
        return out

    def _muted(self, alerts: Mapping[str, Alert], now: datetime) -> set[str]:
        silences = []
        for s in self.store.silences(now):
            try:
                silences.append(parse_matchers(s["matchers"]))
            except ValueError:
                log.warning("unreadable silence ignored id=%s", s["id"])
        muted = {a.id for a in alerts.values()
                 if a.state == "firing" and silenced_by(a.labels, silences)}  # fmt: skip
        return muted | inhibited(alerts.values(), self.inhibit_rules)

    # -- one run ------------------------------------------------------------------------------
    def run(self, now: datetime | None = None) -> RunResult:
        started = time.perf_counter()
        now = now or self.now()
        retention = timedelta(seconds=self.config.retention)
        candidates, failed = self.evaluate(now)
        previous = self._previous()
        alerts, forget = advance(previous, candidates, now, retention=retention,
                                 keep_rules=failed)  # fmt: skip
        changed = [to_record(a) for aid, a in alerts.items() if previous.get(aid) != a]
        if changed:
            self.store.save_alert_state(changed, now)
        self.store.delete_alert_states(forget)
        muted = self._muted(alerts, now)
        groups = {
            key: GroupState(key[0], key[1], list(g["notified"]), g["last_notified_at"])
            for key, g in self.store.alert_groups().items()
        }
        plans, quiet = plan(alerts.values(), self.config, groups, now, muted=muted,
                            send_resolved=self.send_resolved, always=self.always)  # fmt: skip
        notifications = [p.notification for p in plans]
        outcomes = self.deliverer.deliver(self.notifiers, notifications)
        ok = {(o.receiver, o.group_key) for o in outcomes if o.ok}
        after = [p.after.record() for p in plans
                 if (p.notification.receiver, p.notification.group_key) in ok]  # fmt: skip
        self.store.save_alert_groups(after + [q.record() for q in quiet])
        attempts, self._attempts = self._attempts, []
        self.store.record_deliveries(attempts)
        self.store.prune_alerts(now - retention)
        self.metrics.delivered(outcomes)
        self.metrics.states(alerts.values(), muted)
        self.metrics.evaluation_seconds.set(time.perf_counter() - started)
        firing = sum(1 for a in alerts.values() if a.state == "firing")
        log.info("alerts evaluated firing=%d muted=%d notifications=%d failed=%d",
                 firing, len(muted), len(notifications),
                 sum(1 for o in outcomes if not o.ok))  # fmt: skip
        return RunResult(alerts, muted, notifications, outcomes)


def engine_status(engine: AlertsEngine | None) -> dict[str, Any]:
    """Receivers by name and type for the API (never their URLs, tokens or keys)."""
    if engine is None:
        return {"enabled": False, "receivers": [], "rules": []}
    return {
        "enabled": True,
        "receivers": [{"name": r.name, "type": r.type} for r in engine.config.receivers],
        "rules": [{"name": r.name, "type": r.type} for r in engine.rules],
    }
