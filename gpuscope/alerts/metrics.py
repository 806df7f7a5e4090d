"""The alerts' counters and gauges, registered on the collector's ``/metrics`` registry."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge

from gpuscope.alerts.model import Alert, Attempt, Outcome


class AlertMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry or CollectorRegistry()
        self.notifications = Counter(
            "gpuscope_alerts_notifications",
            "Notifications by receiver and outcome (after every retry).",
            ["receiver", "outcome"],
            registry=r,
        )
        self.attempts = Counter(
            "gpuscope_alerts_delivery_attempts",
            "Delivery attempts by receiver and outcome (ok, error).",
            ["receiver", "outcome"],
            registry=r,
        )
        self.alerts = Gauge(
            "gpuscope_alerts",
            "Alerts by rule and state after the last evaluation (muted: silenced or inhibited).",
            ["alertname", "state"],
            registry=r,
        )
        self.rule_errors = Counter(
            "gpuscope_alerts_rule_errors",
            "Rule evaluations that failed, by rule.",
            ["alertname"],
            registry=r,
        )
        self.evaluation_seconds = Gauge(
            "gpuscope_alerts_evaluation_seconds",
            "Duration of the last evaluation and delivery.",
            registry=r,
        )

    def attempted(self, a: Attempt) -> None:
        if a.outcome != "failed":  # a failed notification is counted in notifications
            self.attempts.labels(a.receiver, a.outcome).inc()

    def delivered(self, outcomes: Iterable[Outcome]) -> None:
        for o in outcomes:
            self.notifications.labels(o.receiver, "ok" if o.ok else "failed").inc()

    def states(self, alerts: Iterable[Alert], muted: set[str]) -> None:
        self.alerts.clear()
        counts: dict[tuple[str, str], int] = {}
        for a in alerts:
            state: str = "muted" if a.id in muted else a.state
            key = (a.labels.get("alertname", a.rule), state)
            counts[key] = counts.get(key, 0) + 1
        for (name, state), n in counts.items():
            self.alerts.labels(name, state).set(n)
