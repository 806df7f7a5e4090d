"""Alert rules, matchers, config and lifecycle: pure functions, no I/O."""

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from gpuscope.alerts.config import (
    AlertsConfig,
    MetricRule,
    load_alerts_config,
    load_any,
    parse_duration,
)
from gpuscope.alerts.lifecycle import advance, from_record, to_record
from gpuscope.alerts.matchers import parse_matcher
from gpuscope.alerts.model import Candidate
from gpuscope.alerts.rules import (
    SeriesWindow,
    finding_candidates,
    grouped_candidates,
    render,
    selected,
)
from gpuscope.core.errors import ConfigError

T0 = datetime(2026, 3, 2, 9, 0)


def _finding(kind: str = "idle_session", severity: str = "warning", **subject: str) -> dict:
    subject = subject or {"namespace": "ml", "pod": "nb-1", "container": "main"}
    return {"id": f"{kind}:{sorted(subject.items())}", "kind": kind, "severity": severity,
            "subject": subject, "evidence": {"gpus_held": 2, "idle_minutes": 47.6,
            "idle_since": "2026-03-02T08:12:00", "node": "n1", "gpu_hours_wasted": 1.5},
            "recommendation": {"action": "stop-notebook"}}  # fmt: skip


def test_matchers_follow_alertmanager_syntax() -> None:
    """=, !=, =~ (anchored) and !~; a missing label is the empty string."""
    labels = {"namespace": "ml-team", "severity": "critical"}
    assert parse_matcher('namespace="ml-team"').matches(labels)
    assert parse_matcher("severity!=warning").matches(labels)
    assert parse_matcher('namespace=~"ml-.*"').matches(labels)
    assert not parse_matcher('namespace=~"ml"').matches(labels)  # anchored
    assert parse_matcher('node!~".+"').matches(labels)  # missing label is ""
    with pytest.raises(ValueError, match="bad matcher"):
        parse_matcher("no operator")
    with pytest.raises(ValueError, match="regular expression"):
        parse_matcher('a=~"("')


def test_durations_parse_prometheus_style() -> None:
    assert parse_duration("1h30m") == 5400
    assert parse_duration("90s") == 90
    assert parse_duration(15) == 15
    with pytest.raises(ValueError, match="bad duration"):
        parse_duration("5 minutes")


def test_default_rules_load_and_cover_the_issue() -> None:
    """The shipped rules cover idle sessions, fragmentation, quota, IB, agents/targets, GPUs."""
    names = {r.name for r in AlertsConfig().all_rules()}
    assert {"IdleGpuSession", "GpuFragmentationHigh", "ProjectOverQuotaWhileOthersWait",
            "InfinibandLinkHot", "InfinibandLinkErrors", "GpuNodeDown", "ScrapeTargetDown",
            "GpuUncorrectedEccErrors", "GpuLostFromBus"} <= names  # fmt: skip
    assert AlertsConfig(default_rules=False).all_rules() == []


def test_a_configured_rule_replaces_the_default_of_its_name(tmp_path: Path) -> None:
    path = tmp_path / "alerts.yaml"
    path.write_text("rules:\n  - {name: IdleGpuSession, type: finding, kinds: [idle_session],"
                    " severities: [critical]}\n")  # fmt: skip
    rules = {r.name: r for r in load_alerts_config(path).all_rules()}
    assert rules["IdleGpuSession"].severities == ["critical"]  # type: ignore[union-attr]


def test_bad_alerts_config_is_one_line(tmp_path: Path) -> None:
    """A route to a missing receiver, a bad matcher or a PagerDuty receiver without a key."""
    cases = {
        "route:\n  receiver: nowhere\n": "unknown receiver",
        "route:\n  matchers: ['a~b']\n": "bad matcher",
        "receivers:\n  - {name: pd, type: pagerduty}\n": "routing_key",
        "rules:\n  - {name: X, type: metric, metric: m, window: soon}\n": "bad duration",
    }
    for text, message in cases.items():
        path = tmp_path / "a.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=message) as err:
            load_alerts_config(path)
        assert "\n" not in str(err.value)


def test_settings_file_leads_to_its_alerts_config(tmp_path: Path) -> None:
    """`alerts test --config` takes the main settings too (alerts.config_file, relative)."""
    (tmp_path / "alerts.yaml").write_text(
        "receivers:\n  - {name: hook, type: webhook, url: 'http://127.0.0.1:9/x'}\n"
    )
    (tmp_path / "gpuscope.yaml").write_text("alerts:\n  config_file: alerts.yaml\n")
    assert [r.name for r in load_any(tmp_path / "gpuscope.yaml").receivers] == ["hook"]


def test_secrets_never_print(tmp_path: Path) -> None:
    """A routing key or webhook URL given inline is masked in the config's repr."""
    cfg = AlertsConfig.model_validate({"receivers": [
        {"name": "pd", "type": "pagerduty", "routing_key": "R0UTINGKEY"},
        {"name": "s", "type": "slack", "url": "https://hooks.slack.com/services/T/B/SECRET"},
    ]})  # fmt: skip
    text = repr(cfg) + str(cfg.model_dump())
    assert "R0UTINGKEY" not in text and "SECRET" not in text


def test_finding_rules_label_alerts_by_subject_and_render_summaries() -> None:
    """Each matching finding is one candidate; its subject becomes labels; the summary
    template sees labels and evidence."""
    cfg = AlertsConfig()
    rules = [r for r in cfg.all_rules() if r.type == "finding"]
    found = finding_candidates(rules, [_finding(), _finding(severity="info")])  # type: ignore[arg-type]
    assert len(found) == 1  # info findings do not alert by default
    c = found[0]
    assert c.labels == {"namespace": "ml", "pod": "nb-1", "container": "main",
                        "kind": "idle_session", "severity": "warning",
                        "alertname": "IdleGpuSession"}  # fmt: skip
    assert c.annotations["summary"] == "ml/nb-1 has held 2 GPU(s) idle for 48 min"
    assert c.annotations["recommendation"] == "stop-notebook"


def test_a_broken_template_falls_back_to_labels() -> None:
    assert render("{{ evidence.x | nosuchfilter }}", {"labels": {"a": "1"}}) == "a=1"
    assert render("{{ labels.__class__.__mro__ }}", {"labels": {}}) == ""  # sandbox refuses


def _window(value: float, **labels: str) -> SeriesWindow:
    return SeriesWindow(labels, 4, value, value, value, value, 0.0)


def test_metric_rules_group_by_labels_and_compare() -> None:
    """Increase over the window per GPU; only groups over threshold raise; matchers filter."""
    rule = MetricRule(name="Ecc", metric="gpuscope_gpu_ecc_errors_total", aggregate="increase",
                      matchers=['type="uncorrected"'], by=["node", "gpu"], threshold=0,
                      summary="{{ labels.node }}/{{ labels.gpu }}: {{ value | int }}")  # fmt: skip
    rows = [
        _window(3, node="n1", gpu="0", type="uncorrected"),
        _window(2, node="n1", gpu="0", type="uncorrected", mig_instance="1"),
        _window(0, node="n1", gpu="1", type="uncorrected"),
        _window(9, node="n2", gpu="0", type="corrected"),
    ]
    found = grouped_candidates(rule, selected(rule, rows))
    assert [(c.labels["node"], c.labels["gpu"], c.value) for c in found] == [("n1", "0", 5.0)]
    assert found[0].annotations["summary"] == "n1/0: 5"
    assert found[0].labels["severity"] == "warning"


def _cand(name: str = "R", for_s: float = 0.0, **labels: str) -> Candidate:
    return Candidate(name, {"alertname": name, **labels}, {"summary": "s"}, for_s)


def test_lifecycle_pending_firing_resolved() -> None:
    """`for` holds an alert pending; it fires once the condition has held that long, resolves
    when it stops, and a pending one that stops is forgotten."""
    slow, fast = _cand("Slow", 600, node="n1"), _cand("Fast", 0, node="n1")
    s1, gone = advance({}, [slow, fast], T0)
    assert s1[slow.id].state == "pending" and s1[fast.id].state == "firing" and gone == []
    s2, _ = advance(s1, [slow, fast], T0 + timedelta(minutes=5))
    assert s2[slow.id].state == "pending"
    s3, _ = advance(s2, [slow, fast], T0 + timedelta(minutes=10))
    assert s3[slow.id].state == "firing" and s3[slow.id].fired_at == T0 + timedelta(minutes=10)
    assert s3[fast.id].fired_at == T0  # stays firing from when it started
    s4, gone = advance(s3, [], T0 + timedelta(minutes=15))
    assert {a.state for a in s4.values()} == {"resolved"} and gone == []
    pend, _ = advance({}, [slow], T0)
    after, gone = advance(pend, [], T0 + timedelta(minutes=1))
    assert after == {} and gone == [slow.id]


def test_lifecycle_keeps_alerts_of_a_rule_that_failed_and_forgets_old_resolved() -> None:
    c = _cand("R", node="n1")
    s1, _ = advance({}, [c], T0)
    kept, _ = advance(s1, [], T0 + timedelta(minutes=5), keep_rules={"R"})
    assert kept[c.id].state == "firing"
    resolved, _ = advance(s1, [], T0 + timedelta(minutes=5))
    _, gone = advance(resolved, [], T0 + timedelta(days=8), retention=timedelta(days=7))
    assert gone == [c.id]


def test_alert_records_round_trip() -> None:
    s1, _ = advance({}, [_cand("R", node="n1")], T0)
    (alert,) = s1.values()
    rec = to_record(alert)
    assert rec["alert_id"] == alert.id and rec["state"] == "firing"
    assert from_record(rec) == alert
