"""Notifiers: what each receiver type is sent (pure rendering) and how its answer reads.

A :class:`Notifier` renders a notification into HTTP messages and judges each response; the
delivery layer (:mod:`gpuscope.alerts.delivery`) sends them with retries. Payloads follow the
published shapes: Slack Block Kit (incoming webhook, or ``chat.postMessage`` with a bot
token), PagerDuty Events API v2 (trigger and resolve with one ``dedup_key``), Alertmanager
API v2 ``POST /api/v2/alerts``, and a generic webhook in Alertmanager's webhook format.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

import httpx

from gpuscope.alerts.config import ReceiverConfig, resolve_secret
from gpuscope.alerts.model import Alert, Notification

SLACK_API = "https://slack.com/api/chat.postMessage"
PAGERDUTY_API = "https://events.pagerduty.com/v2/enqueue"
#: Block Kit limits: blocks per message, header text, section text, context elements.
SLACK_MAX_BLOCKS, SLACK_HEADER, SLACK_TEXT, SLACK_CONTEXT = 50, 150, 3000, 10
PD_MAX_DEDUP, PD_MAX_SUMMARY = 255, 1024
PD_SEVERITY = {"critical": "critical", "warning": "warning", "info": "info"}


@dataclass(frozen=True, slots=True)
class Message:
    """One HTTP POST of JSON to make."""

    url: str
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class DeliveryError(Exception):
    """An attempt that failed: ``retryable`` for 429, 5xx and transport errors."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable, self.status, self.retry_after = retryable, status, retry_after


class Notifier(Protocol):
    """A receiver: renders notifications into messages, and reads each answer."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def min_interval(self) -> float:
        """Least seconds between two messages (a receiver's rate limit)."""
        ...

    @property
    def secrets(self) -> tuple[str, ...]:
        """Values that must never reach a log, the delivery log or the API."""
        ...

    def render(self, notification: Notification) -> list[Message]: ...
    def check(self, response: httpx.Response) -> None:
        """Raise :class:`DeliveryError` unless the answer says it was accepted."""
        ...


def retry_after(response: httpx.Response, now: datetime | None = None) -> float | None:
    """Seconds from a Retry-After header (seconds, or an HTTP date)."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    base = now or datetime.now(when.tzinfo)
    return max(0.0, (when - base).total_seconds())


def check_http(response: httpx.Response) -> None:
    """2xx accepted; 429 and 5xx worth another try (after Retry-After); other codes not."""
    code = response.status_code
    if 200 <= code < 300:
        return
    retryable = code == 429 or code >= 500 or code == 408
    raise DeliveryError(f"HTTP {code}", retryable=retryable, status=code,
                        retry_after=retry_after(response))  # fmt: skip


def _title(n: Notification) -> str:
    name = n.common_labels.get("alertname", "alerts")
    if n.notice:
        return n.alerts[0].annotations.get("summary", name)
    count = len(n.firing) if n.firing else len(n.resolved)
    return f"[{n.status.upper()}:{count}] {name}"


def _group_text(n: Notification) -> str:
    labels = {k: v for k, v in n.group_labels.items() if k != "alertname"}
    return " ".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _evidence_line(alert: Alert, limit: int = 8) -> str:
    flat = [(k, v) for k, v in alert.evidence.items()
            if isinstance(v, str | int | float) and not isinstance(v, bool)]  # fmt: skip
    return " ".join(f"{k}={_short(v)}" for k, v in flat[:limit])


def _short(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)[:80]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _is_http(url: str) -> bool:
    return url.startswith(("http://", "https://"))


class SlackNotifier:
    """Slack: Block Kit message per group, by incoming webhook or the Web API."""

    kind = "slack"

    def __init__(self, name: str, *, url: str = "", token: str = "", channel: str = "",
                 max_alerts: int = 20, min_interval: float = 1.0) -> None:  # fmt: skip
        self.name, self.token, self.channel = name, token, channel
        self.url = url or (SLACK_API if token else "")
        self.max_alerts, self.min_interval = max_alerts, min_interval

    @property
    def secrets(self) -> tuple[str, ...]:
        return tuple(s for s in (self.token, "" if self.token else self.url) if s)

    def blocks(self, n: Notification) -> list[dict[str, Any]]:
        icon = {"firing": ":rotating_light:", "resolved": ":white_check_mark:"}[n.status]
        if n.notice:
            icon = ":warning:"
        blocks: list[dict[str, Any]] = [
            {"type": "header",
             "text": {"type": "plain_text", "text": _cut(_title(n), SLACK_HEADER), "emoji": True}},
        ]  # fmt: skip
        group = _group_text(n)
        if group and not n.notice:
            blocks.append(_mrkdwn(f"{icon} *{n.severity}* · {group}"))
        shown = list(n.firing[: self.max_alerts])
        for a in shown:
            blocks.append(_mrkdwn(_alert_text(a)))
        if len(n.firing) > len(shown):
            more = len(n.firing) - len(shown)
            blocks.append(_context(f"… and {more} more firing in this group"))
        if n.resolved:
            names = [a.annotations.get("summary", a.id) for a in n.resolved[: self.max_alerts]]
            text = "*Resolved*\n" + "\n".join(f"• {_cut(s, 200)}" for s in names)
            if len(n.resolved) > len(names):
                text += f"\n… and {len(n.resolved) - len(names)} more"
            blocks.append(_mrkdwn(text))
        if _is_http(n.dashboard_url):
            blocks.append({"type": "actions", "elements": [
                {"type": "button", "text": {"type": "plain_text", "text": "Open dashboard"},
                 "url": n.dashboard_url[:3000]}]})  # fmt: skip
        blocks.append(_context(f"gpuscope · {n.receiver}"))
        if len(blocks) > SLACK_MAX_BLOCKS:  # only with a very large max_alerts
            blocks = [*blocks[: SLACK_MAX_BLOCKS - 1], blocks[-1]]
        return blocks

    def render(self, notification: Notification) -> list[Message]:
        body: dict[str, Any] = {
            "text": _cut(f"{_title(notification)} {_group_text(notification)}".strip(), 3000),
            "blocks": self.blocks(notification),
        }
        headers: dict[str, str] = {}
        if self.token:
            body["channel"] = self.channel
            headers["Authorization"] = f"Bearer {self.token}"
        return [Message(self.url, body, headers)]

    def check(self, response: httpx.Response) -> None:
        check_http(response)
        if not self.token:
            return  # an incoming webhook answers 200 "ok"
        try:
            answer = response.json()
        except ValueError:
            raise DeliveryError("Slack answered without JSON", retryable=True) from None
        if not answer.get("ok", False):
            error = str(answer.get("error", "unknown"))
            raise DeliveryError(f"Slack error {error}", retryable=error == "ratelimited",
                                status=response.status_code)  # fmt: skip


def _mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _cut(text, SLACK_TEXT)}}


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": _cut(text, SLACK_TEXT)}]}


def _alert_text(a: Alert) -> str:
    lines = [f"*{a.annotations.get('summary', a.labels.get('alertname', a.id))}*"]
    if a.annotations.get("description"):
        lines.append(a.annotations["description"])
    evidence = _evidence_line(a)
    if evidence:
        lines.append(f"`{evidence}`")
    since = a.fired_at or a.active_since
    lines.append(f"_{a.severity}, firing since {since:%Y-%m-%d %H:%M} UTC_")
    return "\n".join(lines)


def dedup_key(receiver: str, group_key: str) -> str:
    """PagerDuty's dedup_key for a group: readable, and never over 255 characters."""
    key = f"gpuscope/{receiver}/{group_key}"
    if len(key) <= PD_MAX_DEDUP:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return f"{key[: PD_MAX_DEDUP - 33]}~{digest}"


class PagerDutyNotifier:
    """PagerDuty Events API v2: a trigger per firing group, a resolve when it clears."""

    kind = "pagerduty"

    def __init__(self, name: str, *, routing_key: str, url: str = PAGERDUTY_API,
                 min_interval: float = 0.0) -> None:  # fmt: skip
        self.name, self.routing_key, self.url = name, routing_key, url or PAGERDUTY_API
        self.min_interval = min_interval

    @property
    def secrets(self) -> tuple[str, ...]:
        return (self.routing_key,)

    def render(self, notification: Notification) -> list[Message]:
        n = notification
        key = dedup_key(n.receiver, n.group_key)
        if not n.firing:
            body: dict[str, Any] = {"routing_key": self.routing_key, "event_action": "resolve",
                                    "dedup_key": key}  # fmt: skip
            return [Message(self.url, body)]
        first = n.firing[0]
        summary = f"{_title(n)} {_group_text(n)}: {first.annotations.get('summary', '')}"
        started = min((a.fired_at or a.active_since) for a in n.firing)
        details: dict[str, Any] = {
            "firing": [a.annotations.get("summary", a.id) for a in n.firing[:20]],
            "firing_count": len(n.firing),
            "group_labels": n.group_labels,
            "evidence": first.evidence,
        }
        if n.resolved:
            details["resolved"] = [a.annotations.get("summary", a.id) for a in n.resolved[:20]]
        labels = n.common_labels
        payload = {
            "summary": _cut(summary.strip(), PD_MAX_SUMMARY),
            "source": labels.get("node") or labels.get("target") or "gpuscope",
            "severity": PD_SEVERITY.get(n.severity, "warning"),
            "timestamp": started.isoformat() + ("" if started.tzinfo else "Z"),
            "component": labels.get("kind", "gpuscope"),
            "group": labels.get("namespace") or labels.get("project") or "cluster",
            "class": labels.get("alertname", "alert"),
            "custom_details": details,
        }
        body = {"routing_key": self.routing_key, "event_action": "trigger", "dedup_key": key,
                "payload": payload, "client": "gpuscope"}  # fmt: skip
        if _is_http(n.dashboard_url):
            body["client_url"] = n.dashboard_url
            body["links"] = [{"href": n.dashboard_url, "text": "gpuscope dashboard"}]
        return [Message(self.url, body)]

    def check(self, response: httpx.Response) -> None:
        check_http(response)


def _am_alert(a: Alert, generator: str, ends_after: float, now: datetime) -> dict[str, Any]:
    if a.state == "resolved" and a.resolved_at is not None:
        ends = a.resolved_at
    else:
        ends = now + timedelta(seconds=ends_after)
    out = {
        "labels": dict(a.labels),
        "annotations": dict(a.annotations),
        "startsAt": _rfc3339(a.fired_at or a.active_since),
        "endsAt": _rfc3339(ends),
    }
    if generator:
        out["generatorURL"] = generator
    return out


def _utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)  # naive UTC, as everywhere in alerts


def _rfc3339(ts: datetime) -> str:
    return ts.isoformat() + ("" if ts.tzinfo else "Z")


class AlertmanagerNotifier:
    """Alertmanager API v2: every alert of the group, re-posted on each run while it fires
    (``endsAt`` a little ahead, as Prometheus does), resolved with its real end."""

    kind = "alertmanager"

    def __init__(self, name: str, *, url: str, ends_after: float = 1200.0,
                 clock: Any = None, min_interval: float = 0.0) -> None:  # fmt: skip
        self.name, self.base = name, url.rstrip("/")
        self.ends_after, self.min_interval = ends_after, min_interval
        self.clock: Callable[[], datetime] = clock or _utcnow

    @property
    def secrets(self) -> tuple[str, ...]:
        return ()

    def render(self, notification: Notification) -> list[Message]:
        url = self.base if self.base.endswith("/api/v2/alerts") else self.base + "/api/v2/alerts"
        gen = notification.dashboard_url if _is_http(notification.dashboard_url) else ""
        now = self.clock()
        body = [_am_alert(a, gen, self.ends_after, now) for a in notification.alerts]
        return [Message(url, body)]

    def check(self, response: httpx.Response) -> None:
        check_http(response)


class WebhookNotifier:
    """A generic webhook: Alertmanager's webhook JSON (``version: "4"``)."""

    kind = "webhook"

    def __init__(self, name: str, *, url: str, token: str = "",
                 min_interval: float = 0.0) -> None:  # fmt: skip
        self.name, self.url, self.token, self.min_interval = name, url, token, min_interval

    @property
    def secrets(self) -> tuple[str, ...]:
        return tuple(s for s in (self.url, self.token) if s)

    def render(self, notification: Notification) -> list[Message]:
        n = notification
        alerts = [
            {
                "status": "resolved" if a.state == "resolved" else "firing",
                "labels": a.labels,
                "annotations": a.annotations,
                "startsAt": _rfc3339(a.fired_at or a.active_since),
                "endsAt": _rfc3339(a.resolved_at) if a.resolved_at else "0001-01-01T00:00:00Z",
                "generatorURL": n.dashboard_url,
                "fingerprint": a.id,
                "evidence": a.evidence,
            }
            for a in n.alerts
        ]
        common_ann = {}
        if n.alerts:
            first = n.alerts[0].annotations
            common_ann = {k: v for k, v in first.items()
                          if all(a.annotations.get(k) == v for a in n.alerts)}  # fmt: skip
        body = {
            "version": "4",
            "groupKey": n.group_key,
            "truncatedAlerts": 0,
            "status": n.status,
            "receiver": n.receiver,
            "groupLabels": n.group_labels,
            "commonLabels": n.common_labels,
            "commonAnnotations": common_ann,
            "externalURL": n.dashboard_url,
            "alerts": alerts,
        }
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return [Message(self.url, body, headers)]

    def check(self, response: httpx.Response) -> None:
        check_http(response)


def build_notifier(cfg: ReceiverConfig, env: Any = None) -> Notifier:
    """A notifier from its config, with secrets resolved (ConfigError if one is missing)."""
    where = f"receiver {cfg.name}"
    url = resolve_secret(f"{where} url", cfg.url, cfg.url_file, cfg.url_env, env)
    token = resolve_secret(f"{where} token", cfg.token, cfg.token_file, cfg.token_env, env)
    interval = cfg.min_interval_seconds
    if cfg.type == "slack":
        return SlackNotifier(cfg.name, url=url, token=token, channel=cfg.channel,
                             max_alerts=cfg.max_alerts,
                             min_interval=1.0 if interval is None else interval)  # fmt: skip
    if cfg.type == "pagerduty":
        key = resolve_secret(f"{where} routing_key", cfg.routing_key, cfg.routing_key_file,
                             cfg.routing_key_env, env)  # fmt: skip
        return PagerDutyNotifier(cfg.name, routing_key=key, url=url or PAGERDUTY_API,
                                 min_interval=interval or 0.0)  # fmt: skip
    if cfg.type == "alertmanager":
        return AlertmanagerNotifier(cfg.name, url=url, ends_after=cfg.ends_after,
                                    min_interval=interval or 0.0)  # fmt: skip
    return WebhookNotifier(cfg.name, url=url, token=token, min_interval=interval or 0.0)
