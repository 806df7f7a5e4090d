"""Quota over-use and fairness (gpuscope.analytics.quota) against a real DuckDB store.

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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscope.analytics.quota import run_quota
from gpuscope.collector.batch import Batch
from gpuscope.collector.inventory_records import PodInfo, QuotaInfo
from gpuscope.collector.store import Store
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
    return QuotaInfo(project=project, guaranteed_gpus=gpus, source=source)


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
    """A at 64 GPUs over a guarantee of 48; B (guarantee 16, using 8) waits for 4 GPUs:
    its 4 are owed, so 4 of A's 16 borrowed GPUs are reclaimable."""
    pods = [running("a", f"a{i}", 8) for i in range(8)] + [running("b", "b0", 8)]
    pods.append(pending("b", "b-wait", 4))
    store.record_inventory(T0, pods=pods, quotas=[quota("a", 48), quota("b", 16)])
    result = run_quota(store.cursor(), T0 + timedelta(minutes=5), CFG)
    assert result.kinds == ("quota_overuse",)
    [f] = result.findings
    assert f.kind == "quota_overuse"
    assert f.subject == {"project": "a"}
    assert f.evidence["over_quota_gpus"] == 16
    assert f.evidence["reclaimable_gpus"] == 4
    assert f.evidence["waiting_projects"][0]["project"] == "b"
    assert f.evidence["waiting_projects"][0]["entitled_gpus"] == 4
    # reclaim names whole victims (as Kueue and KAI reclaim), not "4 GPUs": one 8-GPU pod
    target = f.recommendation["target"] if f.recommendation else {}
    assert f.recommendation is not None and f.recommendation["action"] == "reclaim"
    assert (target["project"], target["gpus"], target["frees_gpus"]) == ("a", 4, 8)
    assert [(v["namespace"], v["job"], v["pods"], v["gpus"]) for v in target["victims"]] == [
        ("a", "Pod/a0", ["a0"], 8)
    ]
    assert f.since == T0
    a = result.summary["projects"]["a"]
    assert (a["guaranteed_gpus"], a["used_gpus"], a["over_quota_gpus"]) == (48, 64, 16)
    b = result.summary["projects"]["b"]
    assert (b["used_gpus"], b["pending_gpus"], b["over_quota_gpus"]) == (8, 4, 0)
    assert result.summary["total_reclaimable_gpus"] == 4
    assert result.summary["projects_over_quota"] == 1


def test_reclaim_is_capped_by_the_over_use(store: Store) -> None:
    """B waits for 32 but is owed only guarantee - used = 8; A is only 4 over: reclaim 4."""
    pods = [running("a", "a0", 52), running("b", "b0", 8), pending("b", "b-wait", 32)]
    store.record_inventory(T0, pods=pods, quotas=[quota("a", 48), quota("b", 16)])
    [f] = run_quota(store.cursor(), T0, CFG).findings
    assert f.evidence["reclaimable_gpus"] == 4
    assert f.evidence["waiting_projects"][0]["entitled_gpus"] == 8


def test_no_waiting_project_no_finding(store: Store) -> None:
    """Over-use alone is healthy borrowing; a project waiting *over* its own guarantee,
    or one without a guarantee, is owed nothing."""
    pods = [running("a", "a0", 64), running("b", "b0", 16), pending("b", "b-wait", 4)]
    pods.append(pending("c", "c-wait", 8))  # no quota at all
    store.record_inventory(T0, pods=pods, quotas=[quota("a", 48), quota("b", 16)])
    result = run_quota(store.cursor(), T0, CFG)
    assert result.findings == []
    assert result.summary["projects"]["a"]["over_quota_gpus"] == 16
    assert result.summary["projects"]["c"]["pending_gpus"] == 8
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


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    used=st.lists(st.integers(0, 64), min_size=2, max_size=4),
    guaranteed=st.lists(st.integers(0, 64), min_size=4, max_size=4),
    waiting=st.lists(st.integers(0, 16), min_size=4, max_size=4),
)
def test_reclaim_never_exceeds_what_is_owed_nor_the_over_use(
    used: list[int], guaranteed: list[int], waiting: list[int]
) -> None:
    """Property: total reclaim = min(owed to waiting projects less the unused quota,
    total over-use), each project gives back at most its own over-use, and its victims
    (whole jobs) free at least what it gives back."""
    with Store.open(":memory:") as s:
        names = [f"p{i}" for i in range(len(used))]
        pods = [running(n, f"{n}-r", u) for n, u in zip(names, used, strict=False) if u]
        pods += [pending(n, f"{n}-w", w) for n, w in zip(names, waiting, strict=False) if w]
        quotas = [quota(n, g) for n, g in zip(names, guaranteed, strict=False)]
        s.record_inventory(T0, pods=pods, quotas=quotas)
        result = run_quota(s.cursor(), T0, CFG)
    owed = sum(
        min(w, g - u)
        for u, g, w in zip(used, guaranteed, waiting, strict=False)
        if w > 0 and g - u > 0
    )
    over = sum(max(0, u - g) for u, g in zip(used, guaranteed, strict=False))
    unused = max(0, sum(guaranteed[: len(used)]) - sum(used))
    total = sum(f.evidence["reclaimable_gpus"] for f in result.findings)
    assert total == pytest.approx(min(max(0, owed - unused), over), abs=0.01)
    for f in result.findings:
        assert f.evidence["reclaimable_gpus"] <= f.evidence["over_quota_gpus"] + 1e-9
        if f.recommendation is not None:
            target = f.recommendation["target"]
            assert target["frees_gpus"] >= target["gpus"] - 1e-9


def _nodes(*free_after: int) -> list[Any]:
    from gpuscope.collector.inventory_records import NodeInfo

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
    assert f.evidence["reclaimable_gpus"] == 0 and f.evidence["unused_quota_gpus"] == 6
    [w] = f.evidence["waiting_projects"]
    assert (w["project"], w["waiting_on"], w["admissible_gpus"]) == ("vision", "fragmentation", 16)
    assert result.summary["total_reclaimable_gpus"] == 0
    assert result.summary["projects"]["vision"]["waiting_on"] == "fragmentation"


def test_reclaim_follows_the_over_quota_weight(store: Store) -> None:
    """a and c are each 8 over; b is owed 8 and no quota is unused. What each keeps over
    its guarantee goes by over_quota_weight (a 1, c 3), KAI-style: a gives back 6, c 2;
    each names whole victims (a's 4-GPU jobs: two of them)."""
    pods = [running("a", f"a{i}", 4) for i in range(4)] + [running("c", "c0", 16)]
    pods += [running("b", "b0", 8), pending("b", "b-wait", 8)]
    quotas = [quota("a", 8), quota("c", 8), quota("b", 16)]
    quotas = [replace(q, over_quota_weight=3.0) if q.project == "c" else q for q in quotas]
    store.record_inventory(T0, pods=pods, quotas=quotas)
    found = {f.subject["project"]: f for f in run_quota(store.cursor(), T0, CFG).findings}
    assert found["a"].evidence["reclaimable_gpus"] == pytest.approx(6)
    assert found["c"].evidence["reclaimable_gpus"] == pytest.approx(2)
    a_target = found["a"].recommendation["target"] if found["a"].recommendation else {}
    assert [v["pods"] for v in a_target["victims"]] == [["a0"], ["a1"]]
    assert a_target["frees_gpus"] == 8
