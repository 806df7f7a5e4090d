"""``gpuscope alerts test``: one sample alert to each receiver, through real delivery.

The sample goes through the same notifier and retries as a real alert, bypassing routes
(every named receiver gets it). Receivers that open incidents (PagerDuty, Alertmanager) are
sent the resolve right after, so a test leaves nothing open. Lines name the receiver and its
type, never its URL, token or routing key.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime

import httpx

from gpuscope.alerts.config import AlertsConfig
from gpuscope.alerts.delivery import Deliverer
from gpuscope.alerts.model import Alert, Notification, Outcome, fingerprint
from gpuscope.alerts.notifiers import build_notifier
from gpuscope.core.errors import ConfigError


def sample_alert(now: datetime) -> Alert:
    labels = {"alertname": "GpuscopeTestAlert", "severity": "info", "namespace": "gpuscope"}
    annotations = {"summary": "gpuscope test alert: the wiring to this receiver works",
                   "description": "Sent by `gpuscope alerts test`; no action needed."}  # fmt: skip
    return Alert(fingerprint(labels), "test", "firing", labels, annotations, now, now,
                 evidence={"sent_at": now.isoformat(timespec="seconds")})  # fmt: skip


def _line(name: str, kind: str, what: str, o: Outcome) -> str:
    tries = f"{o.attempts} attempt{'s' if o.attempts != 1 else ''}"
    if o.ok:
        return f"{name} ({kind}): {what} ok after {tries}"
    return f"{name} ({kind}): {what} FAILED after {tries}: {o.error}"


def send_samples(
    config: AlertsConfig,
    receivers: Sequence[str],
    *,
    client: httpx.Client | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[tuple[str, bool]]:
    """(line, ok) per receiver, in the order given."""
    now = datetime.fromtimestamp(clock(), UTC).replace(tzinfo=None)
    alert = sample_alert(now)
    deliverer = Deliverer(config.delivery, client=client, clock=clock, sleep=sleep)
    try:
        for cfg in config.receivers:
            if cfg.name not in receivers:
                continue
            try:
                notifier = build_notifier(cfg)
            except ConfigError as exc:
                yield f"{cfg.name} ({cfg.type}): not configured: {exc}", False
                continue
            key = f"test:{alert.id}"
            note = Notification(cfg.name, key, {"alertname": "GpuscopeTestAlert"}, (alert,),
                                config.dashboard_url)  # fmt: skip
            outcome = deliverer.send(notifier, note)
            yield _line(cfg.name, cfg.type, "trigger", outcome), outcome.ok
            if outcome.ok and cfg.type in ("pagerduty", "alertmanager"):
                done = replace(alert, state="resolved", resolved_at=now)
                resolved = deliverer.send(notifier, replace(note, alerts=(done,)))
                yield _line(cfg.name, cfg.type, "resolve", resolved), resolved.ok
    finally:
        if client is None:
            deliverer.close()
