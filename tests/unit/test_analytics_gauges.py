"""Analytics summaries become gauges a dashboard can use, and findings are counted."""

from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from analytics.base import Analysis
from collector.analytics_gauges import AnalyticsGauges
from gpuscope.records import Finding, finding_id

NOW = datetime(2026, 11, 16, tzinfo=UTC)


def samples(gauges: AnalyticsGauges) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    reg = CollectorRegistry()
    reg.register(gauges)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(generate_latest(reg).decode())
        for s in fam.samples
    }


def test_numbers_flat_and_per_entity_become_gauges() -> None:
    """Top-level numbers get gpuscope_<detector>_<key>; per-project maps get a label."""
    g = AnalyticsGauges()
    g.update(
        {
            "quota": Analysis(
                kinds=("quota_overuse",),
                summary={
                    "total_guaranteed_gpus": 112,
                    "note": "text is skipped",
                    "projects": {
                        "nlp": {"used_gpus": 64, "over_quota_gpus": 16},
                        "vision": {"used_gpus": 20.5, "over_quota_gpus": 0},
                    },
                },
            )
        }
    )
    got = samples(g)
    assert got[("gpuscope_quota_total_guaranteed_gpus", ())] == 112
    assert got[("gpuscope_quota_used_gpus", (("project", "nlp"),))] == 64
    assert got[("gpuscope_quota_used_gpus", (("project", "vision"),))] == 20.5
    assert got[("gpuscope_quota_over_quota_gpus", (("project", "nlp"),))] == 16
    assert not any("note" in name for name, _ in got)


def test_findings_are_counted_by_kind_and_severity_with_zeros() -> None:
    """Every kind a detector can report is present (0 when none), so alerts see it resolve."""
    subject = {"namespace": "r", "pod": "nb-0"}
    f = Finding(finding_id("idle_session", subject), "idle_session", "warning", subject, NOW, NOW)
    g = AnalyticsGauges()
    g.update({"idle": Analysis(kinds=("idle_session", "session_time_limit"), findings=[f])})
    got = samples(g)
    key = lambda k, s: ("gpuscope_findings", (("kind", k), ("severity", s)))  # noqa: E731
    assert got[key("idle_session", "warning")] == 1
    assert got[key("idle_session", "critical")] == 0
    assert got[key("session_time_limit", "warning")] == 0
    g.update({"idle": Analysis(kinds=("idle_session", "session_time_limit"))})
    assert samples(g)[key("idle_session", "warning")] == 0  # the latest run replaces the last


def test_finding_ids_are_stable_and_distinct() -> None:
    """The same kind and subject always give the same id; another subject another id."""
    a = finding_id("idle_session", {"namespace": "r", "pod": "nb-0"})
    assert a == finding_id("idle_session", {"pod": "nb-0", "namespace": "r"})
    assert a != finding_id("idle_session", {"namespace": "r", "pod": "nb-1"})
    assert a != finding_id("session_time_limit", {"namespace": "r", "pod": "nb-0"})
    assert a.startswith("idle_session:")
