"""One-off notices routed like alerts: :func:`send_notice`.

For the actions executor: before it stops an idle notebook it warns the workload's owner.
The notice's labels (``namespace``, ``pod``, ``project``...) go through the same route tree
as an alert's, so the site decides in one place who hears about what. A notice is sent at
once, with the same retries; it has no lifecycle and is never resolved.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

import httpx

from gpuscope.alerts.config import AlertsConfig
from gpuscope.alerts.delivery import Deliverer
from gpuscope.alerts.model import Alert, Attempt, Notice, Notification, Outcome, fingerprint
from gpuscope.alerts.notifiers import Notifier, build_notifier
from gpuscope.alerts.routing import group_of, routes_for


def notice_alert(notice: Notice, now: datetime) -> Alert:
    labels = {"alertname": "Notice", **notice.labels, "severity": notice.severity}
    annotations = {"summary": notice.title, "description": notice.text}
    return Alert(fingerprint(labels), "notice", "firing", labels, annotations, now, now)


def send_notice(
    config: AlertsConfig,
    notice: Notice,
    *,
    notifiers: Mapping[str, Notifier] | None = None,
    client: httpx.Client | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    on_attempt: Callable[[Attempt], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> list[Outcome]:
    """Send ``notice`` to every receiver its labels route to; one outcome per receiver.

    An empty list means no route named a receiver for these labels. Never raises for a
    failed delivery (see the outcomes); raises ConfigError for a receiver whose secret is
    missing. ``on_attempt`` receives each attempt (e.g. ``store.record_deliveries``).
    """
    now = datetime.fromtimestamp(clock(), UTC).replace(tzinfo=None)
    alert = notice_alert(notice, now)
    notes = []
    for route in routes_for(alert.labels, config):
        key, labels = group_of(alert, route)
        notes.append(Notification(route.receiver, f"notice:{alert.id}:{key}", labels,
                                  (alert,), config.dashboard_url, notice=True))  # fmt: skip
    if not notes:
        return []
    wanted = {n.receiver for n in notes}
    if notifiers is None:
        notifiers = {r.name: build_notifier(r, env) for r in config.receivers if r.name in wanted}
    deliverer = Deliverer(config.delivery, client=client, clock=clock, sleep=sleep,
                          on_attempt=on_attempt)  # fmt: skip
    try:
        return deliverer.deliver(notifiers, notes)
    finally:
        if client is None:
            deliverer.close()
