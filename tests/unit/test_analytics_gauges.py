"""Analytics summaries become gauges a dashboard can use, and findings are counted."""

from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuscope.analytics.base import Analysis
from gpuscope.collector.gauges.analytics_gauges import AnalyticsGauges
from gpuscope.core.records import Finding, finding_id

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
    routed = ("gpuscope_findings", (("kind", "idle_session"), ("namespace", "r"), ("pod", "nb-0"),
                                    ("severity", "warning")))  # fmt: skip
    assert got[routed] == 1  # the finding's own namespace and pod, to route it
    assert got[key("idle_session", "warning")] == 0
    assert got[key("idle_session", "critical")] == 0
    assert got[key("session_time_limit", "warning")] == 0
    g.update({"idle": Analysis(kinds=("idle_session", "session_time_limit"))})
    after = samples(g)
    assert after[key("idle_session", "warning")] == 0  # the latest run replaces the last
    assert routed not in after


def test_findings_carry_owner_and_project_from_the_evidence() -> None:
    """Issue 24: gpuscope_findings had only kind and severity, so an alert built on it
    could not be routed to a team. Each finding's namespace/pod (subject) and owner and
    project (evidence) are labels; empty ones are left out."""
    subject = {"namespace": "r", "pod": "nb-0", "container": "c"}
    evidence = {"owner": "alice", "project": "vision", "node": "n1"}
    f = Finding(finding_id("idle_session", subject), "idle_session", "critical", subject,
                NOW, NOW, evidence)  # fmt: skip
    quota = Finding("q", "quota_overuse", "warning", {"project": "nlp"}, NOW, NOW)
    g = AnalyticsGauges()
    g.update({"idle": Analysis(kinds=("idle_session",), findings=[f]),
              "quota": Analysis(kinds=("quota_overuse",), findings=[quota])})  # fmt: skip
    got = {labels: v for (name, labels), v in samples(g).items() if name == "gpuscope_findings"}
    assert got[(("kind", "idle_session"), ("namespace", "r"), ("node", "n1"), ("owner", "alice"),
                ("pod", "nb-0"), ("project", "vision"), ("severity", "critical"))] == 1  # fmt: skip
    assert got[(("kind", "quota_overuse"), ("project", "nlp"), ("severity", "warning"))] == 1


def test_finding_ids_are_stable_and_distinct() -> None:
    """The same kind and subject always give the same id; another subject another id."""
    a = finding_id("idle_session", {"namespace": "r", "pod": "nb-0"})
    assert a == finding_id("idle_session", {"pod": "nb-0", "namespace": "r"})
    assert a != finding_id("idle_session", {"namespace": "r", "pod": "nb-1"})
    assert a != finding_id("session_time_limit", {"namespace": "r", "pod": "nb-0"})
    assert a.startswith("idle_session:")


def test_per_entity_field_named_like_a_total_gets_the_label_in_its_name() -> None:
    """The fragmentation summary has free_gpus for the cluster and per pool: two names, two
    label sets (one name with two label sets would be an invalid exposition)."""
    g = AnalyticsGauges()
    g.update(
        {
            "fragmentation": Analysis(
                kinds=("gpu_fragmentation",),
                summary={
                    "free_gpus": 12,
                    "pools": {"a100": {"free_gpus": 5, "largest_placeable_job_gpus": 2}},
                    "jobs_fit_now": {"1": 7, "8": 0},
                    "node_free_gpus": {"n0": 1.5},
                },
            )
        }
    )
    got = samples(g)
    assert got[("gpuscope_fragmentation_free_gpus", ())] == 12
    assert got[("gpuscope_fragmentation_pool_free_gpus", (("pool", "a100"),))] == 5
    # a field no total takes keeps its plain name
    assert got[("gpuscope_fragmentation_largest_placeable_job_gpus", (("pool", "a100"),))] == 2
    assert got[("gpuscope_fragmentation_jobs_fit_now", (("job_gpus", "8"),))] == 0
    assert got[("gpuscope_fragmentation_node_free_gpus", (("node", "n0"),))] == 1.5
    names = [name for name, _ in got]
    assert names.count("gpuscope_fragmentation_free_gpus") == 1


def test_idle_findings_become_one_series_each_with_since_and_gpus() -> None:
    """Idle sessions are listed with when they went idle (how long = time() - value) and the
    GPUs they hold; other findings give no such series."""
    since = datetime(2026, 11, 15, 22, tzinfo=UTC)
    subject = {"namespace": "r", "pod": "nb-0", "container": "main"}
    idle = Finding(
        finding_id("idle_session", subject), "idle_session", "critical", subject, since, NOW,
        evidence={"gpus_held": 2, "node": "n3", "workload_kind": "interactive"},
    )  # fmt: skip
    other = Finding(finding_id("quota_overuse", {"project": "p"}), "quota_overuse", "warning",
                    {"project": "p"}, since, NOW)  # fmt: skip
    g = AnalyticsGauges()
    g.update(
        {
            "idle": Analysis(kinds=("idle_session",), findings=[idle]),
            "quota": Analysis(kinds=("quota_overuse",), findings=[other]),
        }
    )
    got = samples(g)
    labels = (
        ("container", "main"), ("kind", "idle_session"), ("namespace", "r"), ("node", "n3"),
        ("pod", "nb-0"), ("workload_kind", "interactive"),
    )  # fmt: skip
    assert got[("gpuscope_idle_since_timestamp_seconds", labels)] == since.timestamp()
    assert got[("gpuscope_idle_gpus_held", labels)] == 2
    assert sum(n == "gpuscope_idle_gpus_held" for n, _ in got) == 1
    g.update({"idle": Analysis(kinds=("idle_session",))})
    assert not any(n == "gpuscope_idle_gpus_held" for n, _ in samples(g))


def test_names_promtool_rejects_are_renamed_to_base_units() -> None:
    """GPU-hours become GPU-seconds (x 3600), a gauge loses ``_total``, the detector's name is
    not said twice; the summary keeps its keys (docs/metrics.md, Renamed metrics)."""
    g = AnalyticsGauges()
    g.update(
        {
            "idle": Analysis(kinds=(), summary={"idle_sessions": 2, "gpu_hours_wasted": 1.5}),
            "quota": Analysis(
                kinds=(),
                summary={
                    "total_gpu_hours": 2.0,
                    "window_hours": 24,
                    "projects": {"nlp": {"gpu_hours": 0.5, "share_of_gpu_hours": 0.25}},
                },
            ),
            "fragmentation": Analysis(kinds=(), summary={"mig_instances_total": 7}),
        }
    )
    got = samples(g)
    assert got[("gpuscope_idle_sessions", ())] == 2
    assert got[("gpuscope_idle_wasted_gpu_seconds", ())] == 5400
    assert got[("gpuscope_quota_total_used_gpu_seconds", ())] == 7200
    assert got[("gpuscope_quota_window_seconds", ())] == 86400
    assert got[("gpuscope_quota_used_gpu_seconds", (("project", "nlp"),))] == 1800
    assert got[("gpuscope_quota_gpu_time_share_ratio", (("project", "nlp"),))] == 0.25
    assert got[("gpuscope_fragmentation_mig_instances", ())] == 7
    names = {name for name, _ in got}
    assert not {n for n in names if "hours" in n or n.endswith("_total") or "idle_idle" in n}
