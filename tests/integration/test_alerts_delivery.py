"""Delivery against local HTTP receivers: published payload shapes, retries after 429 and
500 (honouring Retry-After), a receiver that hangs, a failing one that blocks no other,
and no secret in the delivery log. Sleeps are injected: no test waits for a backoff."""

from datetime import datetime

import httpx
import pytest

from gpuscope.alerts.config import AlertsConfig, DeliveryConfig
from gpuscope.alerts.delivery import Deliverer
from gpuscope.alerts.lifecycle import advance
from gpuscope.alerts.model import Attempt, Candidate, Notice, Notification
from gpuscope.alerts.notifiers import PagerDutyNotifier, SlackNotifier, WebhookNotifier
from gpuscope.alerts.notify import send_notice
from tests.integration.alert_receivers import FakeTime, Reply, receiver

pytestmark = pytest.mark.integration
T0 = datetime(2026, 3, 2, 9, 0)


def _note(receiver_name: str = "r") -> Notification:
    cands = [Candidate("GpuLostFromBus", {"alertname": "GpuLostFromBus", "node": "n1",
                       "gpu": "0", "severity": "critical"}, {"summary": "GPU 0 lost"})]  # fmt: skip
    (alert,) = advance({}, cands, T0)[0].values()
    return Notification(receiver_name, "g1", {"alertname": "GpuLostFromBus"}, (alert,))


def _deliverer(ft: FakeTime, log: list[Attempt], **cfg: float) -> Deliverer:
    config = DeliveryConfig(**{"timeout_seconds": 2.0, "max_attempts": 4, **cfg})  # type: ignore[arg-type]
    return Deliverer(config, clock=ft.clock, sleep=ft.sleep, on_attempt=log.append)


def test_slack_429_is_retried_after_its_retry_after() -> None:
    """Slack answers 429 with Retry-After: 7; the next attempt waits exactly that long."""
    ft, log = FakeTime(), []
    with receiver(Reply(429, b"rate_limited", {"Retry-After": "7"}), Reply(200)) as rx:
        d = _deliverer(ft, log)
        secret_url = rx.url + "/services/T000/B000/XXXXSECRET"
        outcome = d.send(SlackNotifier("slack", url=secret_url), _note("slack"))
    assert outcome.ok and outcome.attempts == 2
    assert 7.0 in ft.sleeps
    assert [a.outcome for a in log] == ["error", "ok"] and log[0].http_status == 429
    body = rx.bodies()[1]
    assert body["blocks"][0]["type"] == "header" and "GpuLostFromBus" in body["text"]
    assert rx.requests[0]["path"] == "/services/T000/B000/XXXXSECRET"
    assert all("XXXXSECRET" not in str(a) for a in log)


def test_pagerduty_500s_back_off_then_give_up_at_max_attempts() -> None:
    """5xx is retried with growing backoff; after max_attempts the outcome is a failure."""
    ft, log = FakeTime(), []
    with receiver(Reply(500, b"oops")) as rx:
        d = _deliverer(ft, log, max_attempts=3, backoff_initial_seconds=1.0)
        pd = PagerDutyNotifier("pd", routing_key="ROUTINGKEY123", url=rx.url + "/v2/enqueue")
        outcome = d.send(pd, _note("pd"))
    assert not outcome.ok and outcome.attempts == 3 and outcome.http_status == 500
    assert len(rx.requests) == 3 and len(ft.sleeps) == 2
    body = rx.bodies()[0]
    assert body["event_action"] == "trigger" and body["routing_key"] == "ROUTINGKEY123"
    assert body["payload"]["severity"] == "critical" and len(body["dedup_key"]) <= 255
    assert [a.outcome for a in log] == ["error", "error", "error", "failed"]
    assert all("ROUTINGKEY123" not in str(a) for a in log)


def test_a_client_error_is_not_retried() -> None:
    ft, log = FakeTime(), []
    with receiver(Reply(400, b'{"status":"invalid event"}')) as rx:
        outcome = _deliverer(ft, log).send(WebhookNotifier("w", url=rx.url), _note("w"))
    assert not outcome.ok and outcome.attempts == 1 and len(rx.requests) == 1


def test_deadline_stops_retries_that_would_start_too_late() -> None:
    """A Retry-After past the deadline ends the retries at once."""
    ft, log = FakeTime(), []
    with receiver(Reply(503, b"", {"Retry-After": "50"})) as rx:
        d = _deliverer(ft, log, deadline_seconds=30, max_attempts=10)
        outcome = d.send(WebhookNotifier("w", url=rx.url), _note("w"))
    assert not outcome.ok and outcome.attempts == 1 and ft.sleeps == []


def test_a_hanging_receiver_times_out_and_does_not_block_another() -> None:
    """One receiver never answers in time; the other still gets its message, and the hanging
    one's attempts end on the per-attempt timeout."""
    ft, log = FakeTime(), []
    # a 2 s timeout: the fast receiver answers within it on a loaded machine; the slow
    # one never does (it waits 60 s; its thread is a daemon, so the test does not)
    with receiver(Reply(200, delay=60.0)) as slow, receiver(Reply(200)) as fast:
        d = _deliverer(ft, log, timeout_seconds=2.0, max_attempts=2)
        notifiers = {"slow": WebhookNotifier("slow", url=slow.url),
                     "fast": WebhookNotifier("fast", url=fast.url)}  # fmt: skip
        outcomes = d.deliver(notifiers, [_note("slow"), _note("fast")])
    by = {o.receiver: o for o in outcomes}
    assert by["fast"].ok and not by["slow"].ok
    assert by["slow"].error == "timed out" and by["slow"].attempts == 2
    assert len(fast.requests) == 1


def test_slack_messages_to_one_webhook_are_paced_one_a_second() -> None:
    ft, log = FakeTime(), []
    with receiver(Reply(200)) as rx:
        d = _deliverer(ft, log)
        slack = SlackNotifier("slack", url=rx.url)
        start = ft.clock()
        for _ in range(3):
            assert d.send(slack, _note("slack")).ok
    assert ft.clock() - start == pytest.approx(2.0)  # 3 messages: 2 waits of 1 s


def test_send_notice_routes_by_labels() -> None:
    """A notice goes where its labels route (the actions executor's owner warning)."""
    with receiver(Reply(200)) as team, receiver(Reply(200)) as ops:
        config = AlertsConfig.model_validate({
            "receivers": [{"name": "ops", "type": "webhook", "url": ops.url},
                          {"name": "ml", "type": "slack", "url": team.url}],
            "route": {"receiver": "ops", "routes": [
                {"matchers": ['namespace="ml"'], "receiver": "ml"}]},
        })  # fmt: skip
        ft = FakeTime()
        notice = Notice(
            "Notebook ml/nb-1 will be stopped in 30 min",
            "It has held 1 GPU idle for 2 h.",
            {"namespace": "ml", "pod": "nb-1"},
        )
        outcomes = send_notice(config, notice, clock=ft.clock, sleep=ft.sleep)
    assert [(o.receiver, o.ok) for o in outcomes] == [("ml", True)]
    assert ops.requests == []
    body = team.bodies()[0]
    assert body["blocks"][0]["text"]["text"] == "Notebook ml/nb-1 will be stopped in 30 min"
    assert "It has held 1 GPU idle" in str(body["blocks"])


def test_transport_errors_do_not_leak_the_url() -> None:
    ft, log = FakeTime(), []
    d = _deliverer(ft, log, max_attempts=2)
    dead = "http://127.0.0.1:9/hooks/SECRETPATH"
    outcome = d.send(WebhookNotifier("w", url=dead), _note("w"))
    assert not outcome.ok and "SECRETPATH" not in str(outcome) and "SECRETPATH" not in str(log)
    assert isinstance(d.client, httpx.Client)
