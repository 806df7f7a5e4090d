"""The alerts job over a real DuckDB store, with local receivers: grouping, no repeat across
a restart, repeat interval, resolve; metric rules over stored samples with PagerDuty trigger
and resolve, and a node down inhibiting its GPU; silences over the API and the CLI;
`gpuscope alerts test`."""

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import generate_latest

from gpuscope.alerts.api import alerts_router
from gpuscope.alerts.config import AlertsConfig
from gpuscope.alerts.engine import AlertsEngine
from gpuscope.cli.main import main
from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.http_api.api import ApiState, create_app
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.scraping.ingest import IngestWriter
from gpuscope.collector.scraping.limits import IngestLimits
from gpuscope.collector.scraping.outcome import Target
from gpuscope.collector.scraping.scrape import Scraper
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store
from gpuscope.core.records import Finding, finding_id
from tests.conftest import free_port
from tests.integration.alert_receivers import FakeTime, Reply, receiver
from tests.integration.helpers import http_server, send

pytestmark = pytest.mark.integration
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def _config(slack: str, pd: str, **extra: object) -> AlertsConfig:
    return AlertsConfig.model_validate({
        "dashboard_url": "https://grafana.example/d/gpuscope",
        "receivers": [
            {"name": "slack", "type": "slack", "url": slack + "/services/T/B/SLACKSECRET",
             "min_interval_seconds": 0},
            {"name": "pd", "type": "pagerduty", "routing_key": "PDSECRETKEY",
             "url": pd + "/v2/enqueue"},
        ],
        "route": {"receiver": "slack", "routes": [
            {"matchers": ['severity="critical"'], "receiver": "pd", "continue": True}]},
        **extra,
    })  # fmt: skip


def _idle(ns: str, i: int, at: datetime) -> Finding:
    subject = {"namespace": ns, "pod": f"nb-{i}", "container": "main"}
    return Finding(finding_id("idle_session", subject), "idle_session", "warning", subject,
                   at - timedelta(minutes=45), at,
                   {"gpus_held": 1, "idle_minutes": 45, "node": f"n{i % 4}"})  # fmt: skip


def test_grouping_restart_repeat_and_resolve(tmp_path: Path) -> None:
    ft = FakeTime(START.timestamp())
    now = lambda: datetime.fromtimestamp(ft.clock(), UTC)  # noqa: E731
    db = tmp_path / "a.duckdb"
    with receiver() as slack, receiver(Reply(202, b'{"status":"success"}')) as pd:
        config = _config(slack.url, pd.url)
        store = Store.open(db)
        store.record_findings([_idle("cv", i, now()) for i in range(40)], now(),
                              kinds=["idle_session"])  # fmt: skip
        metrics = CollectorMetrics()
        engine = AlertsEngine(store, config, clock=ft.clock, sleep=ft.sleep,
                              registry=metrics.registry)  # fmt: skip
        engine.run()
        (msg,) = slack.bodies()
        assert msg["text"].startswith("[FIRING:40] IdleGpuSession")
        assert pd.requests == []  # warnings do not page
        ft.sleep(300)
        engine.run()
        assert len(slack.requests) == 1  # nothing new: no repeat
        engine.close()
        store.close()

        store = Store.open(db)  # restart: the state is in the database
        engine = AlertsEngine(store, config, clock=ft.clock, sleep=ft.sleep)
        ft.sleep(300)
        store.record_findings([_idle("cv", i, now()) for i in range(40)], now(),
                              kinds=["idle_session"])  # fmt: skip
        engine.run()
        assert len(slack.requests) == 1  # neither repeated ...
        ft.sleep(300)
        store.record_findings([_idle("cv", i, now()) for i in range(39)], now(),
                              kinds=["idle_session"])  # fmt: skip
        engine.run()
        assert len(slack.requests) == 2  # ... nor forgotten: the resolve is announced
        assert slack.bodies()[1]["text"].startswith("[FIRING:39]")
        assert "Resolved" in str(slack.bodies()[1]["blocks"])
        ft.sleep(4 * 3600)
        store.record_findings([_idle("cv", i, now()) for i in range(39)], now(),
                              kinds=["idle_session"])  # fmt: skip
        engine.run()
        assert len(slack.requests) == 3  # repeat interval (4 h)
        rows, total = store.deliveries()
        assert total == 3 and {r["outcome"] for r in rows} == {"ok"}
        assert "SLACKSECRET" not in str(rows)
        text = generate_latest(metrics.registry).decode()
        assert 'gpuscope_alerts_notifications_total{outcome="ok",receiver="slack"} 1.0' in text
        engine.close()
        store.close()


def _scrape(store: Store, at: datetime, node: str, *, gpu_up: float, ecc: float) -> None:
    gpu = (("gpu", "0"), ("node", node), ("uuid", f"GPU-{node}-0"))
    names = ["gpuscope_agent_info", "gpuscope_gpu_up", "gpuscope_gpu_ecc_errors_total"]
    labels = [
        (("node", node), ("version", "1")),
        gpu,
        tuple(sorted((*gpu, ("type", "uncorrected")))),
    ]
    store.append_scrape(Batch(f"http://{node}:9835/metrics", int(at.timestamp() * 1000), names,
                              labels, [1.0, gpu_up, ecc],
                              {"gpuscope_gpu_ecc_errors": "counter"}))  # fmt: skip


def test_metric_rules_page_and_resolve_and_node_down_inhibits(tmp_path: Path) -> None:
    """n1 logs an uncorrected ECC error; n2's agent stops after reporting its GPU lost:
    GpuNodeDown (n2) pages, GpuLostFromBus (n2) is muted by it; when n2 returns, PagerDuty
    gets a resolve with the trigger's dedup_key."""
    ft = FakeTime(START.timestamp())
    store = Store.open(tmp_path / "m.duckdb")
    t = START - timedelta(minutes=20)
    while t <= START:
        _scrape(store, t, "n1", gpu_up=1, ecc=0 if t < START - timedelta(minutes=10) else 1)
        if t <= START - timedelta(minutes=4):
            _scrape(store, t, "n2", gpu_up=0, ecc=0)
        t += timedelta(seconds=15)
    with receiver() as slack, receiver(Reply(202, b'{"status":"success"}')) as pd:
        engine = AlertsEngine(store, _config(slack.url, pd.url), clock=ft.clock, sleep=ft.sleep)
        result = engine.run()
        firing = {(a.labels["alertname"], a.labels.get("node")) for a in result.alerts.values()
                  if a.state == "firing"}  # fmt: skip
        assert firing == {("GpuUncorrectedEccErrors", "n1"), ("GpuNodeDown", "n2"),
                          ("GpuLostFromBus", "n2")}  # fmt: skip
        muted = {result.alerts[i].labels["alertname"] for i in result.muted}
        assert muted == {"GpuLostFromBus"}
        triggers = {b["payload"]["class"]: b for b in pd.bodies()}
        assert set(triggers) == {"GpuUncorrectedEccErrors", "GpuNodeDown"}
        assert triggers["GpuNodeDown"]["payload"]["source"] == "n2"
        assert "1 uncorrected ECC" in triggers["GpuUncorrectedEccErrors"]["payload"]["summary"]

        t = START + timedelta(minutes=4)
        while t <= START + timedelta(minutes=10):  # n2 is back, its GPU answering
            _scrape(store, t, "n1", gpu_up=1, ecc=1)
            _scrape(store, t, "n2", gpu_up=1, ecc=0)
            t += timedelta(seconds=15)
        ft.sleep(600)
        engine.run()
        resolves = [b for b in pd.bodies() if b["event_action"] == "resolve"]
        assert len(resolves) == 1
        assert resolves[0]["dedup_key"] == triggers["GpuNodeDown"]["dedup_key"]
        assert "PDSECRETKEY" not in str(store.deliveries()[0])
        engine.close()
    store.close()


def test_a_target_down_alert_never_carries_the_password_of_its_url(tmp_path: Path) -> None:
    """Regression (issue 13, secrets in URLs): a target ``http://user:password@host/metrics``
    leaked its password into the alert labels sent to Slack and PagerDuty. A real scrape of
    such a target that refuses the credentials is stored by the collector's writer; the
    ScrapeTargetDown alert built from the store names the target with its password
    redacted, in Slack's text and in PagerDuty's payload alike."""
    password = "hunter2-very-secret"
    ft = FakeTime((START - timedelta(minutes=6)).timestamp())
    store = Store.open(tmp_path / "t.duckdb")

    def refuse(h: Any) -> None:
        send(h, b"who are you?\n", "text/plain", status=401)

    with http_server(refuse) as base, receiver() as slack, receiver(Reply(202)) as pd:
        target = Target(base.replace("http://", f"http://scraper:{password}@") + "/metrics")
        writer = IngestWriter(store, TargetRegistry([target]), CollectorMetrics(),
                              IngestLimits(), clock=ft.clock)  # fmt: skip
        scraper = Scraper(timeout_seconds=30, clock=ft.clock)
        down = ['alertname="ScrapeTargetDown"']
        config = _config(slack.url, pd.url, route={"receiver": "slack", "routes": [
            {"matchers": down, "receiver": "slack", "continue": True},
            {"matchers": down, "receiver": "pd"}]})  # fmt: skip
        engine = AlertsEngine(store, config, clock=ft.clock, sleep=ft.sleep)
        for _ in range(2):  # down at -6 min (pending) and now (firing: ``for: 5m``)
            [outcome] = scraper.scrape([target])
            assert not outcome.up and "401" in outcome.error
            writer.write([outcome])
            engine.run()
            ft.sleep(360)
        engine.close()
    store.close()
    sent = [*slack.bodies(), *pd.bodies()]
    assert len(slack.bodies()) == 1 and len(pd.bodies()) == 1
    assert password not in json.dumps(sent)
    redacted = base.replace("http://", "http://scraper:xxxxx@") + "/metrics"
    assert redacted in json.dumps(slack.bodies()[0])
    assert redacted in json.dumps(pd.bodies()[0]["payload"])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, TestClient, AlertsEngine, FakeTime, object]]:
    """The collector's app with the alerts router, served by uvicorn on loopback."""
    import uvicorn

    ft = FakeTime(START.timestamp())
    store = Store.open(tmp_path / "s.duckdb")
    store.record_findings([_idle("cv", i, START) for i in range(3)], START,
                          kinds=["idle_session"])  # fmt: skip
    with receiver() as slack, receiver(Reply(202)) as pd:
        engine = AlertsEngine(store, _config(slack.url, pd.url), clock=ft.clock, sleep=ft.sleep)
        state = ApiState(store=store, targets=TargetRegistry(), metrics=CollectorMetrics(),
                         token="tok", clock=ft.clock,
                         routers=[partial(alerts_router, store, engine, ft.clock)])  # fmt: skip
        app = create_app(state)
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                               log_level="warning", lifespan="off"))  # fmt: skip
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.02)
        try:
            yield f"http://127.0.0.1:{port}", TestClient(app), engine, ft, slack
        finally:
            server.should_exit = True
            thread.join(10)
            engine.close()
            store.close()


def test_silences_over_the_api_mute_until_expired(served) -> None:  # type: ignore[no-untyped-def]
    _, client, engine, ft, slack = served
    body = {"matchers": ['namespace="cv"'], "duration": "2h", "comment": "maintenance"}
    assert client.post("/api/v1/silences", json=body).status_code == 401
    bad = client.post("/api/v1/silences", json={"matchers": ["a=b"]},
                      headers={"Authorization": "Bearer tok"})  # fmt: skip
    assert bad.status_code == 400 and "expiry" in bad.json()["detail"]
    r = client.post("/api/v1/silences", json=body, headers={"Authorization": "Bearer tok"})
    assert r.status_code == 201
    sid = r.json()["id"]
    assert [s["id"] for s in client.get("/api/v1/silences").json()["items"]] == [sid]
    engine.run()
    assert slack.requests == []  # silenced
    assert client.get("/api/v1/alerts", params={"state": "firing"}).json()["total"] == 3
    gone = client.delete(f"/api/v1/silences/{sid}", headers={"Authorization": "Bearer tok"})
    assert gone.json() == {"id": sid, "expired": True, "was_active": True}
    assert client.get("/api/v1/silences").json()["items"] == []
    ft.sleep(60)
    engine.run()
    assert len(slack.requests) == 1
    receivers = client.get("/api/v1/alerts/receivers").text
    assert "slack" in receivers and "SLACKSECRET" not in receivers and "PDSECRET" not in receivers
    log = client.get("/api/v1/alerts/deliveries").json()
    assert log["total"] == 1 and log["items"][0]["receiver"] == "slack"


def test_silence_cli(served, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    url, _, _, _, _ = served
    monkeypatch.setenv("GPUSCOPE_API_TOKEN", "tok")
    args = ["--url", url]
    assert main(["alerts", "silence", "add", "--match", "alertname=~Idle.*", "--match",
                 "namespace=cv", "--duration", "30m", "--comment", "upgrade", *args]) == 0  # fmt: skip
    sid = capsys.readouterr().out.split()[0]
    assert main(["alerts", "silence", "list", *args]) == 0
    out = capsys.readouterr().out
    assert sid in out and "upgrade" in out and "alertname=~Idle.*" in out
    assert main(["alerts", "silence", "list", "--json", *args]) == 0  # for scripts
    listed = json.loads(capsys.readouterr().out)
    assert [s["id"] for s in listed["items"]] == [sid]
    assert listed["items"][0]["matchers"] == ["alertname=~Idle.*", "namespace=cv"]
    assert main(["alerts", "silence", "expire", sid, *args]) == 0
    assert "expired" in capsys.readouterr().out
    assert main(["alerts", "silence", "expire", "nope", *args]) == 2
    assert "404" in capsys.readouterr().err
    monkeypatch.setenv("GPUSCOPE_API_TOKEN", "wrong")
    assert main(["alerts", "silence", "add", "--match", "a=b", "--duration", "1h", *args]) == 2
    assert main(["alerts", "silence", "add", "--match", "a=b", *args]) == 2


def test_alerts_test_command_reports_each_receiver_without_secrets(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    with receiver() as slack, receiver(Reply(202)) as pd, receiver(Reply(400)) as bad:
        cfg = tmp_path / "alerts.yaml"
        cfg.write_text(
            "receivers:\n"
            f"  - {{name: team, type: slack, url: '{slack.url}/services/T/B/SLACKSECRET'}}\n"
            f"  - {{name: oncall, type: pagerduty, routing_key_env: PD_KEY, url: '{pd.url}'}}\n"
            f"  - {{name: broken, type: webhook, url: '{bad.url}/HOOKSECRET'}}\n"
        )
        import os

        os.environ["PD_KEY"] = "PDSECRETKEY"
        try:
            rc = main(["alerts", "test", "--config", str(cfg)])
        finally:
            del os.environ["PD_KEY"]
    out = capsys.readouterr().out
    assert rc == 1
    assert "team (slack): trigger ok after 1 attempt" in out
    assert "oncall (pagerduty): trigger ok" in out and "oncall (pagerduty): resolve ok" in out
    assert "broken (webhook): trigger FAILED after 1 attempt: HTTP 400" in out
    assert "SECRET" not in out
    assert [b["event_action"] for b in pd.bodies()] == ["trigger", "resolve"]
    assert slack.bodies()[0]["blocks"][0]["type"] == "header"
