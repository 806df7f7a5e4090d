"""Quota over-use and fairness (gpuscope.analytics.queueing.quota) against a real DuckDB store.

Histories are built through the collector's own write path (Store.record_inventory for
pods and quotas, Store.append_scrape of gpuscope_gpu_workload_info for who held which GPU),
so the detector reads exactly what the collector writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuscope.analytics.queueing.quota import run_quota
from gpuscope.collector.cluster.inventory_records import PodInfo, QuotaInfo
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import AnalyticsSettings

T0 = datetime(2025, 3, 3, 10, 0, 0)
INFO = "gpuscope_gpu_workload_info"
CFG = AnalyticsSettings()


def ms(t: datetime) -> int:
    return int(t.replace(tzinfo=UTC).timestamp() * 1000)


def running(project: str, name: str, gpus: int, *, fraction: float | None = None) -> PodInfo:
    return PodInfo(
        namespace=project, name=name, uid=name, node="n1", phase="Running",
        start_time=None, gpu_request=gpus, gpu_fraction=fraction, project=project,
    )  # fmt: skip


def pending(project: str, name: str, gpus: int) -> PodInfo:
    return PodInfo(
        namespace=project, name=name, uid=name, node=None, phase="Pending",
        start_time=None, gpu_request=gpus, project=project, pending_reason="Unschedulable",
    )  # fmt: skip


def quota(project: str, gpus: float, source: str = "kueue") -> QuotaInfo:
    """A ClusterQueue in one cohort with every queue here, which reclaims what the cohort
    borrows from it (``reclaimWithinCohort: Any``): where Kueue does reclaim. Kueue's
    defaults (no cohort, ``Never``) are tested in test_queues_seen.py."""
    if source != "kueue":
        return QuotaInfo(project=project, guaranteed_gpus=gpus, source=source)
    return QuotaInfo(
        project=project, guaranteed_gpus=gpus, source=source, cohort="all",
        reclaim_within_cohort="Any",
    )  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "q.duckdb") as s:
        yield s


def hold(store: Store, t: datetime, held: list[tuple[str, str, str]], target: str = "n1") -> None:
    """One scrape of ``target`` showing (project, pod, gpu uuid) holders."""
    labs = [
        tuple(sorted({"node": target, "gpu": u[-1], "uuid": u, "namespace": p, "pod": pod,
                      "container": "main", "project": p, "workload_kind": "training"}.items()))
        for p, pod, u in held
    ]  # fmt: skip
    store.append_scrape(
        Batch(target, ms(t), [INFO] * len(labs), labs, [1.0] * len(labs), {INFO: "gauge"})
    )


def test_overuse_reclaimable_while_another_project_waits_under_its_guarantee(
    store: Store,
) -> None:
    """A at 56 GPUs over a guarantee of 48; B (guarantee 16, using 8) waits for 4 GPUs:
    the cohort's 64 are all in use, B is within its nominal quota, so Kueue
    (reclaimWithinCohort Any) preempts one of A's whole 8-GPU jobs, not "4 GPUs"."""
    pods = [running("a", f"a{i}", 8) for i in range(7)] + [running("b", "b0", 8)]
    pods.append(pending("b", "b-wait", 4))
    store.record_inventory(T0, pods=pods, quotas=[quota("a", 48), quota("b", 16)])
    result = run_quota(store.cursor(), T0 + timedelta(minutes=5), CFG)
    assert result.kinds == ("quota_overuse",)
    [f] = result.findings
    assert f.kind == "quota_overuse" and f.severity == "warning"
    assert f.subject == {"project": "a"}
    assert f.evidence["over_quota_gpus"] == 8
    assert f.evidence["reclaimable_gpus"] == 8
    [w] = f.evidence["waiting_jobs"]
    assert (w["project"], w["waits_on"], w["rule"]) == ("b", "quota", "kueue.reclaimWithinCohort")
    target = f.recommendation["target"] if f.recommendation else {}
    assert f.recommendation is not None and f.recommendation["action"] == "reclaim"
    assert (target["project"], target["frees_gpus"]) == ("a", 8)
    assert [(v["namespace"], v["job"], v["pods"], v["gpus"]) for v in target["victims"]] == [
        ("a", "Pod/a0", ["a0"], 8)
    ]
    assert f.since == T0
    a = result.summary["projects"]["a"]
    assert (a["guaranteed_gpus"], a["used_gpus"], a["over_quota_gpus"]) == (48, 56, 8)
    b = result.summary["projects"]["b"]
    assert (b["used_gpus"], b["pending_gpus"], b["over_quota_gpus"]) == (8, 4, 0)
    assert b["waiting_on"] == "quota" and b["rule"] == "kueue.reclaimWithinCohort"
    assert result.summary["total_reclaimable_gpus"] == 8
    assert result.summary["projects_over_quota"] == 1


def test_a_job_over_its_nominal_quota_preempts_nobody(store: Store) -> None:
    """B (guarantee 16, using 8) asks 32: more than its nominal quota, so Kueue only admits
    it from unused quota it may borrow, never by preempting (borrowWithinCohort Never)."""
    pods = [running("a", "a0", 56), running("b", "b0", 8), pending("b", "b-wait", 32)]
    store.record_inventory(T0, pods=pods, quotas=[quota("a", 48), quota("b", 16)])
    result = run_quota(store.cursor(), T0, CFG)
    assert [f.severity for f in result.findings] == []
    [job] = result.summary["pending_jobs"]
    assert (job["waits_on"], job["rule"], job["victims"]) == ("quota", "kueue.exceeds_nominal", [])


def test_no_waiting_project_no_finding(store: Store) -> None:
    """Over-use alone is healthy borrowing; a project waiting *over* its own guarantee,
    or one without a guarantee, is owed nothing."""
    pods = [running("a", "a0", 48), running("b", "b0", 16), pending("b", "b-wait", 4)]
    pods.append(pending("c", "c-wait", 8))  # no quota at all
    store.record_inventory(T0, pods=pods, quotas=[quota("a", 40), quota("b", 16)])
    result = run_quota(store.cursor(), T0, CFG)
    assert result.findings == []
    assert result.summary["projects"]["a"]["over_quota_gpus"] == 8
    assert result.summary["projects"]["c"]["pending_gpus"] == 8
    assert result.summary["projects"]["c"]["scheduler"] == "unmanaged"
    assert result.summary["projects_waiting"] == 0


def test_fractions_are_counted_as_fractions(store: Store) -> None:
    pods = [running("inf", f"p{i}", 0, fraction=0.25) for i in range(3)]
    pods.append(running("inf", "half", 0, fraction=0.5))
    store.record_inventory(T0, pods=pods, quotas=[quota("inf", 1)])
    p = run_quota(store.cursor(), T0, CFG).summary["projects"]["inf"]
    assert p["used_gpus"] == 1.25
    assert p["over_quota_gpus"] == 0.25


def test_as_of_history(store: Store) -> None:
    """The answer at a time before the demand appeared, or after it was met, has no
    finding: the inventory is read as of the time analysed."""
    base = [running("a", "a0", 64), running("b", "b0", 8)]
    quotas = [quota("a", 48), quota("b", 16)]
    store.record_inventory(T0, pods=base, quotas=quotas)
    store.record_inventory(T0 + timedelta(hours=1), pods=[*base, pending("b", "w", 4)])
    store.record_inventory(T0 + timedelta(hours=2), pods=[*base, running("b", "w", 4)])
    assert run_quota(store.cursor(), T0 + timedelta(minutes=30), CFG).findings == []
    assert len(run_quota(store.cursor(), T0 + timedelta(minutes=90), CFG).findings) == 1
    assert run_quota(store.cursor(), T0 + timedelta(minutes=150), CFG).findings == []


def test_two_sources_of_one_guarantee_count_once(store: Store) -> None:
    quotas = [quota("a", 48, "kueue"), quota("a", 40, "config")]
    store.record_inventory(T0, pods=[running("a", "a0", 50)], quotas=quotas)
    p = run_quota(store.cursor(), T0, CFG).summary["projects"]["a"]
    assert (p["guaranteed_gpus"], p["over_quota_gpus"]) == (48, 2)


def test_fairness_shares_of_gpu_hours(store: Store) -> None:
    """a holds 3 GPUs, b 1 GPU for 2 h: shares 0.75/0.25 against guarantees 0.5/0.5.
    A fractional (0.5) pod of c holds half a GPU for 1 h."""
    store.record_inventory(
        T0,
        pods=[running("a", "a0", 3), running("b", "b0", 1), running("c", "c0", 0, fraction=0.5)],
        quotas=[quota("a", 8), quota("b", 8)],
    )
    held = [("a", "a0", "GPU-0"), ("a", "a0", "GPU-1"), ("a", "a0", "GPU-2"), ("b", "b0", "GPU-3")]
    hold(store, T0, held)
    hold(store, T0 + timedelta(hours=1), held)  # still held; c starts on its own node
    hold(store, T0 + timedelta(hours=1), [("c", "c0", "GPU-7")], target="n2")
    hold(store, T0 + timedelta(hours=2), [], target="n2")
    hold(store, T0 + timedelta(hours=2), [])  # everything released
    result = run_quota(store.cursor(), T0 + timedelta(hours=3), CFG, window=timedelta(hours=4))
    p = result.summary["projects"]
    assert p["a"]["gpu_hours"] == 6
    assert p["b"]["gpu_hours"] == 2
    assert p["c"]["gpu_hours"] == 0.5
    assert p["a"]["share_of_gpu_hours"] == round(6 / 8.5, 4)
    assert p["a"]["guaranteed_share"] == 0.5
    assert p["a"]["fairness_ratio"] == round(6 / 8.5 / 0.5, 4)
    assert p["c"]["fairness_ratio"] is None
    assert result.summary["total_gpu_hours"] == 8.5
    # a window that starts an hour in sees only the second hour
    late = run_quota(store.cursor(), T0 + timedelta(hours=3), CFG, window=timedelta(hours=2))
    assert late.summary["projects"]["a"]["gpu_hours"] == 3


def test_open_intervals_count_up_to_the_time_analysed(store: Store) -> None:
    hold(store, T0, [("a", "a0", "GPU-0")])
    result = run_quota(store.cursor(), T0 + timedelta(minutes=90), CFG)
    assert result.summary["projects"]["a"]["gpu_hours"] == 1.5


def _nodes(*free_after: int) -> list[Any]:
    from gpuscope.collector.cluster.inventory_records import NodeInfo

    return [NodeInfo(name=f"n{i + 1}", gpu_model="H100", allocatable_gpus=8, cpu_milli=64000)
            for i in range(len(free_after))]  # fmt: skip


def _on(pod: PodInfo, node: str) -> PodInfo:
    return replace(pod, node=node)


def test_a_job_blocked_by_fragmentation_is_not_a_quota_reclaim(store: Store) -> None:
    """Regression (issue 12): vision's 4-GPU job waited and the product said "reclaim 4
    GPUs from nlp" while the cohort had unused guarantees: Kueue would admit it without
    preempting anyone. nlp (guarantee 8) holds 13 GPUs, vision (16) holds 5; 6 of the 24
    guaranteed GPUs are unused; 3 GPUs are free on n2 and 3 on n3. The job is admissible:
    it waits because no node has 4 free GPUs. No reclaim; the finding names the blocker."""
    pods = [_on(running("nlp", "nlp-a", 8), "n1"), _on(running("nlp", "nlp-b", 5), "n2"),
            _on(running("vision", "v-a", 5), "n3"), pending("vision", "detector", 4)]  # fmt: skip
    store.record_inventory(T0, nodes=_nodes(0, 3, 3), pods=pods,
                           quotas=[quota("nlp", 8), quota("vision", 16)])  # fmt: skip
    result = run_quota(store.cursor(), T0, CFG)
    [f] = result.findings
    assert (f.kind, f.subject, f.severity, f.recommendation) == (
        "quota_overuse",
        {"project": "nlp"},
        "info",
        None,
    )
    assert f.evidence["reclaimable_gpus"] == 0
    [w] = f.evidence["waiting_jobs"]
    assert (w["project"], w["waits_on"], w["rule"]) == ("vision", "placement", "kueue.fits_quota")
    assert result.summary["total_reclaimable_gpus"] == 0
    assert result.summary["projects"]["vision"]["waiting_on"] == "fragmentation"


def test_kai_reclaim_follows_the_over_quota_weight(store: Store) -> None:
    """KAI queues a and c are each 8 over their quota of 8; b (quota 16, using 8) waits for
    8 and no GPU is free. No node is stored, so the deserved quotas stand in for the fair
    shares (overQuotaWeight then decides nothing): a and c hold the same share of theirs
    and a comes first by name; two of a's whole preemptible 4-GPU jobs (the most recent
    first) free the 8 GPUs before c's job is reached."""
    pods = [running("a", f"a{i}", 4) for i in range(4)] + [running("c", "c0", 16)]
    pods += [running("b", "b0", 8), pending("b", "b-wait", 8)]
    quotas = [quota("a", 8, "kai"), quota("c", 8, "kai"), quota("b", 16, "kai")]
    quotas = [replace(q, over_quota_weight=3.0) if q.project == "c" else q for q in quotas]
    store.record_inventory(T0, pods=pods, quotas=quotas)
    found = {f.subject["project"]: f for f in run_quota(store.cursor(), T0, CFG).findings}
    assert set(found) == {"a"}
    assert found["a"].evidence["reclaimable_gpus"] == 8
    target = found["a"].recommendation["target"] if found["a"].recommendation else {}
    assert [v["pods"] for v in target["victims"]] == [["a0"], ["a1"]]
    assert target["rules"] == ["kai.reclaim"]
