"""Routing, grouping, silences, inhibition and payload shapes (pure, no I/O)."""

import dataclasses
from datetime import datetime, timedelta

from gpuscope.alerts.config import AlertsConfig
from gpuscope.alerts.lifecycle import advance
from gpuscope.alerts.matchers import parse_matchers
from gpuscope.alerts.model import Candidate, Notification
from gpuscope.alerts.notifiers import (
    AlertmanagerNotifier,
    PagerDutyNotifier,
    SlackNotifier,
    WebhookNotifier,
    dedup_key,
)
from gpuscope.alerts.routing import GroupState, inhibited, plan, routes_for

T0 = datetime(2026, 3, 2, 9, 0)
CONFIG = AlertsConfig.model_validate({
    "dashboard_url": "https://grafana.example/d/gpuscope",
    "receivers": [
        {"name": "slack", "type": "slack", "url": "https://hooks.example/T/B/x"},
        {"name": "pd", "type": "pagerduty", "routing_key": "k"},
        {"name": "ml-team", "type": "webhook", "url": "https://hooks.example/ml"},
    ],
    "route": {"receiver": "slack", "group_by": ["alertname", "namespace"],
              "repeat_interval": "4h", "routes": [
                  {"matchers": ['severity="critical"'], "receiver": "pd", "continue": True},
                  {"matchers": ['namespace="ml"'], "receiver": "ml-team"},
              ]},
})  # fmt: skip


def _alerts(n: int, namespace: str = "ml", severity: str = "warning") -> dict:
    cands = [
        Candidate("IdleGpuSession", {"alertname": "IdleGpuSession", "namespace": namespace,
                  "pod": f"nb-{i}", "severity": severity, "node": f"n{i % 3}"},
                  {"summary": f"{namespace}/nb-{i} idle"}, 0.0, None, {"idle_minutes": 40 + i})
        for i in range(n)
    ]  # fmt: skip
    return advance({}, cands, T0)[0]


def test_routes_first_match_wins_unless_continue() -> None:
    assert [r.receiver for r in routes_for({"severity": "critical", "namespace": "ml"}, CONFIG)] \
        == ["pd", "ml-team"]  # fmt: skip
    assert [r.receiver for r in routes_for({"namespace": "cv"}, CONFIG)] == ["slack"]
    assert routes_for({"a": "b"}, AlertsConfig()) == []  # no receiver: nothing is sent


def test_forty_idle_notebooks_of_one_namespace_are_one_message() -> None:
    """Grouping by alertname and namespace: 40 notebooks, one notification per namespace."""
    alerts = _alerts(40, "cv") | _alerts(3, "nlp")
    plans, _ = plan(alerts.values(), CONFIG, {}, T0)
    assert sorted((p.notification.receiver, len(p.notification.alerts)) for p in plans) == [
        ("slack", 3), ("slack", 40)]  # fmt: skip
    body = SlackNotifier("slack", url="https://x", max_alerts=20).render(plans[0].notification)
    blocks = body[0].body["blocks"]
    assert len(blocks) <= 50
    assert any("20 more firing" in str(b) for b in blocks)


def test_a_group_is_not_told_twice_until_repeat_interval_or_change() -> None:
    alerts = _alerts(2, "cv")
    plans, _ = plan(alerts.values(), CONFIG, {}, T0)
    told = {(p.after.receiver, p.after.group_key): p.after for p in plans}
    again, _ = plan(alerts.values(), CONFIG, told, T0 + timedelta(hours=1))
    assert again == []
    later, _ = plan(alerts.values(), CONFIG, told, T0 + timedelta(hours=4))
    assert len(later) == 1  # repeat interval
    more = alerts | _alerts(3, "cv")  # a third notebook joins the group
    grown, _ = plan(more.values(), CONFIG, told, T0 + timedelta(hours=1))
    assert len(grown) == 1 and len(grown[0].notification.firing) == 3


def test_resolved_alerts_are_announced_once_to_whoever_was_told() -> None:
    alerts = _alerts(2, "cv")
    plans, _ = plan(alerts.values(), CONFIG, {}, T0)
    told = {(p.after.receiver, p.after.group_key): p.after for p in plans}
    one_left, _ = advance(alerts, [_cand_of(a) for a in list(alerts.values())[:1]],
                          T0 + timedelta(minutes=5))  # fmt: skip
    plans2, _ = plan(one_left.values(), CONFIG, told, T0 + timedelta(minutes=5))
    (p,) = plans2
    assert len(p.notification.firing) == 1 and len(p.notification.resolved) == 1
    told2 = {(p.after.receiver, p.after.group_key): p.after}
    plans3, _ = plan(one_left.values(), CONFIG, told2, T0 + timedelta(minutes=10))
    assert plans3 == []


def _cand_of(a):  # type: ignore[no-untyped-def]
    return Candidate(a.rule, a.labels, a.annotations, 0.0, a.value, a.evidence)


def test_silenced_alerts_are_not_sent_and_come_back_when_the_silence_ends() -> None:
    alerts = _alerts(2, "cv")
    muted = set(alerts)
    plans, _ = plan(alerts.values(), CONFIG, {}, T0, muted=muted)
    assert plans == []
    plans, _ = plan(alerts.values(), CONFIG, {}, T0 + timedelta(hours=1))
    assert len(plans) == 1


def test_node_down_inhibits_the_alerts_of_its_node() -> None:
    cands = [
        Candidate("GpuNodeDown", {"alertname": "GpuNodeDown", "node": "n1", "severity": "critical"}, {}),
        Candidate("GpuLostFromBus", {"alertname": "GpuLostFromBus", "node": "n1", "gpu": "0"}, {}),
        Candidate("GpuLostFromBus", {"alertname": "GpuLostFromBus", "node": "n2", "gpu": "0"}, {}),
    ]  # fmt: skip
    alerts = advance({}, cands, T0)[0]
    rules = AlertsConfig().inhibitions()
    muted = inhibited(alerts.values(), rules)
    assert {alerts[i].labels["node"] for i in muted} == {"n1"}
    assert all(alerts[i].labels["alertname"] == "GpuLostFromBus" for i in muted)


def _note(n: int = 2, resolved: bool = False) -> Notification:
    alerts = list(_alerts(n, "cv", "critical").values())
    if resolved:
        alerts = [dataclasses.replace(a, state="resolved", resolved_at=T0) for a in alerts]
    return Notification("pd", "0.0:{\"alertname\":\"IdleGpuSession\",\"namespace\":\"cv\"}",
                        {"alertname": "IdleGpuSession", "namespace": "cv"}, tuple(alerts),
                        "https://grafana.example/d/gpuscope")  # fmt: skip


def test_pagerduty_events_v2_trigger_and_resolve_share_the_dedup_key() -> None:
    """Events API v2: routing_key, event_action, dedup_key <= 255, payload.summary <= 1024,
    source, severity in critical/error/warning/info, timestamp, custom_details."""
    pd = PagerDutyNotifier("pd", routing_key="k" * 32)
    (trigger,) = pd.render(_note())
    body = trigger.body
    assert body["event_action"] == "trigger" and body["routing_key"] == "k" * 32
    assert set(body["payload"]) >= {"summary", "source", "severity", "timestamp", "custom_details"}
    assert body["payload"]["severity"] in {"critical", "error", "warning", "info"}
    assert len(body["payload"]["summary"]) <= 1024
    assert body["links"][0]["href"].startswith("https://")
    (resolve,) = pd.render(_note(resolved=True))
    assert resolve.body == {"routing_key": "k" * 32, "event_action": "resolve",
                            "dedup_key": body["dedup_key"]}  # fmt: skip
    assert len(dedup_key("pd", "x" * 1000)) == 255
    assert dedup_key("pd", "x" * 1000) != dedup_key("pd", "x" * 999 + "y")


def test_slack_block_kit_message_within_limits() -> None:
    """header plain_text <= 150, sections <= 3000, a dashboard button, fallback text."""
    slack = SlackNotifier("s", url="https://hooks.example/x")
    (msg,) = slack.render(_note(3))
    body = msg.body
    assert body["text"] and body["blocks"][0]["type"] == "header"
    assert len(body["blocks"][0]["text"]["text"]) <= 150
    for b in body["blocks"]:
        assert b["type"] in {"header", "section", "context", "actions", "divider"}
        if b["type"] == "section":
            assert b["text"]["type"] == "mrkdwn" and len(b["text"]["text"]) <= 3000
    buttons = [e for b in body["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert buttons[0]["url"] == "https://grafana.example/d/gpuscope"
    web = SlackNotifier("s", token="xoxb-1", channel="#gpu")
    (msg,) = web.render(_note(1))
    assert msg.url == "https://slack.com/api/chat.postMessage"
    assert msg.body["channel"] == "#gpu" and msg.headers["Authorization"] == "Bearer xoxb-1"


def test_alertmanager_v2_and_webhook_shapes() -> None:
    am = AlertmanagerNotifier("am", url="http://am:9093", clock=lambda: T0)
    (msg,) = am.render(_note(2))
    assert msg.url == "http://am:9093/api/v2/alerts"
    assert isinstance(msg.body, list) and len(msg.body) == 2
    assert set(msg.body[0]) == {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}
    assert msg.body[0]["endsAt"] > msg.body[0]["startsAt"]
    (msg,) = am.render(_note(1, resolved=True))
    assert msg.body[0]["endsAt"] == "2026-03-02T09:00:00Z"
    (hook,) = WebhookNotifier("w", url="http://h").render(_note(2))
    assert hook.body["version"] == "4" and hook.body["status"] == "firing"
    assert hook.body["groupLabels"] == {"alertname": "IdleGpuSession", "namespace": "cv"}
    assert {a["status"] for a in hook.body["alerts"]} == {"firing"}


def test_group_state_records_round_trip() -> None:
    g = GroupState("r", "k", ["b", "a"], T0)
    assert g.record()["notified"] == ["a", "b"]
    assert parse_matchers(['a="b"'])[0].matches({"a": "b"})
