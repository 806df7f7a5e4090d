"""The alerts' records: an alert with its lifecycle, a notification, a notice, an attempt.

Frozen dataclasses: the pure stages (rules, lifecycle, routing) take them and return new
ones; only the engine reads and writes the store.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

State = Literal["pending", "firing", "resolved"]
Severity = Literal["info", "warning", "critical"]


def fingerprint(labels: Mapping[str, str]) -> str:
    """A stable id of a label set: the same labels give the same alert in any run."""
    text = "\x1f".join(f"{k}\x1e{labels[k]}" for k in sorted(labels))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A rule's condition holding now for one label set (before ``for`` is applied)."""

    rule: str
    labels: dict[str, str]
    annotations: dict[str, str]
    #: ``for``: how long the condition must hold before the alert fires.
    for_seconds: float = 0.0
    value: float | None = None
    #: The numbers behind it (a finding's evidence, a metric's value and threshold).
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return fingerprint(self.labels)


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert and where it is in its lifecycle (the ``alert_state`` row's record)."""

    id: str
    rule: str
    state: State
    labels: dict[str, str]
    annotations: dict[str, str]
    #: Since when the condition has held without a break.
    active_since: datetime
    fired_at: datetime | None = None
    resolved_at: datetime | None = None
    value: float | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def severity(self) -> str:
        return self.labels.get("severity", "warning")

    @property
    def since(self) -> datetime:
        """Since when it has been in its state."""
        if self.state == "resolved" and self.resolved_at is not None:
            return self.resolved_at
        if self.state == "firing" and self.fired_at is not None:
            return self.fired_at
        return self.active_since


@dataclass(frozen=True, slots=True)
class Notification:
    """What one receiver is told about one group of alerts in one go."""

    receiver: str
    group_key: str
    group_labels: dict[str, str]
    #: Firing alerts of the group, then the resolved ones being announced.
    alerts: tuple[Alert, ...]
    dashboard_url: str = ""
    #: A notice (not an alert): sent once, never resolved.
    notice: bool = False

    @property
    def status(self) -> Literal["firing", "resolved"]:
        return "firing" if self.firing else "resolved"

    @property
    def firing(self) -> tuple[Alert, ...]:
        return tuple(a for a in self.alerts if a.state != "resolved")

    @property
    def resolved(self) -> tuple[Alert, ...]:
        return tuple(a for a in self.alerts if a.state == "resolved")

    @property
    def common_labels(self) -> dict[str, str]:
        if not self.alerts:
            return {}
        first = self.alerts[0].labels
        return {k: v for k, v in first.items() if all(a.labels.get(k) == v for a in self.alerts)}

    @property
    def severity(self) -> str:
        order = {"critical": 0, "warning": 1, "info": 2}
        return min((a.severity for a in self.alerts), key=lambda s: order.get(s, 3), default="info")


@dataclass(frozen=True, slots=True)
class Notice:
    """A one-off message routed like an alert: ``labels`` decide the receiver (e.g. the
    actions executor warning a workload's owner before it stops an idle notebook)."""

    title: str
    text: str
    labels: dict[str, str] = field(default_factory=dict)
    severity: Severity = "warning"


@dataclass(frozen=True, slots=True)
class Attempt:
    """One delivery attempt, as the delivery log keeps it (no secrets in ``error``)."""

    ts: datetime
    receiver: str
    receiver_type: str
    group_key: str
    status: str
    alerts: int
    attempt: int
    outcome: Literal["ok", "error", "failed"]
    http_status: int | None = None
    error: str | None = None
    duration_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """How delivering one notification ended, after every attempt."""

    receiver: str
    group_key: str
    ok: bool
    attempts: int
    error: str | None = None
    http_status: int | None = None
