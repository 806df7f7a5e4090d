"""Issue 37's queue rules, each as its minimal case on objects as kubectl prints them
(docs/analytics.md, "Queues", names Kueue's source for each):

* ``LowerOrNewerEqualPriority`` compares when workloads were created, not started;
* hierarchical reclaim: a request that fits a Cohort's own quota reclaims from a queue
  borrowing in another branch of the tree, beyond its queue's nominal quota;
* a ClusterQueue whose resource groups do not cover ``nvidia.com/gpu`` never admits a
  GPU job, not even by borrowing idle GPUs of its cohort;
* a pod from a namespace the ClusterQueue's ``namespaceSelector`` does not select is
  inadmissible (and an unset selector selects none)."""

from __future__ import annotations

from typing import Any

from gpuscope.analytics.queueing.queues import QueueVerdict, judge
from gpuscope.collector.cluster.inventory_records import pod_from_json
from gpuscope.collector.cluster.queue_records import quotas_from_objects
from gpuscope.core.kube_objects import objects_from_documents
from tests.kueue_objects import (
    GPU,
    KUEUE,
    UNSET,
    cluster_queue,
    kubectl_list,
    local_queue,
    namespace,
    pod,
)


def _judge(objects: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[QueueVerdict]:
    quotas = quotas_from_objects(objects_from_documents([("o", kubectl_list(objects + pods))]))
    return list(judge([pod_from_json(p) for p in pods], quotas).verdicts)


def _cohort(name: str, nominal: int, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"resourceGroups": [{"coveredResources": [GPU], "flavors": [
        {"name": "default-flavor", "resources": [{"name": GPU, "nominalQuota": nominal}]}]}]}  # fmt: skip
    if parent:
        spec["parent"] = parent
    return {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def test_lower_or_newer_equal_priority_compares_creation_not_start() -> None:
    """A running job created at 10:00 and started at 11:30, a pending one at the same
    priority created at 11:00: the running one is older, so Kueue preempts nothing."""
    objects = [
        cluster_queue("team", 8, preemption={"withinClusterQueue": "LowerOrNewerEqualPriority"}),
        local_queue("team", "team"),
    ]
    pods = [
        pod("team", "old-0", 8, "gpu-1", job="old", minute=120, started=210),
        pod("team", "new-0", 4, None, job="new", minute=180),
    ]
    [v] = _judge(objects, pods)
    assert (v.waits_on, v.victims) == ("quota", ())
    # created after the pending one, it is newer: then it is the victim
    pods[0] = pod("team", "old-0", 8, "gpu-1", job="old", minute=190, started=210)
    [v] = _judge(objects, pods)
    assert [x.job for x in v.victims] == ["Job/old"]


def test_hierarchical_reclaim_takes_back_a_cohorts_own_quota() -> None:
    """Cohort ``vision-org`` (8 GPUs of its own, under ``root``) holds ClusterQueue
    ``vision`` (nominal 0, reclaimWithinCohort Any) whose 4-GPU job waits; ``batch``
    (nominal 4, under ``root``) borrows all 12 GPUs of the tree at a higher priority.
    The request fits inside vision's own subtree: Kueue preempts batch's 4-GPU job."""
    objects = [
        _cohort("root", 0), _cohort("vision-org", 8, "root"),
        cluster_queue("vision", 0, "vision-org", preemption={"reclaimWithinCohort": "Any"}),
        cluster_queue("batch", 4, "root"),
        local_queue("vision", "vision"), local_queue("batch", "batch"),
    ]  # fmt: skip
    pods = [
        pod("batch", "big-0", 8, "gpu-1", job="big", minute=0, priority=5),
        pod("batch", "small-0", 4, "gpu-2", job="small", minute=10, priority=5),
        pod("vision", "train-0", 4, None, job="train", minute=20),
    ]
    [v] = _judge(objects, pods)
    assert (v.waits_on, v.rule) == ("quota", "kueue.reclaimWithinCohort")
    assert [(x.namespace, x.job) for x in v.victims] == [("batch", "Job/small")]


def test_a_queue_without_a_gpu_resource_never_admits_gpu_jobs() -> None:
    """``cpu-only`` covers cpu and memory only, in a cohort with 8 idle GPUs: Kueue never
    admits its GPU job (a queue must define a quota, even 0, to borrow a resource)."""
    objects = [
        cluster_queue("cpu-only", 0, "shared", gpu_resource=False),
        cluster_queue("gpus", 8, "shared"),
        local_queue("etl", "cpu-only"),
    ]
    [v] = _judge(objects, [pod("etl", "job-0", 2, None, job="job")])
    assert (v.waits_on, v.rule, v.victims) == ("quota", "kueue.resource_not_covered", ())
    # the same queue with a GPU quota of 0 borrows the idle GPUs
    objects[0] = cluster_queue("cpu-only", 0, "shared")
    [v] = _judge(objects, [pod("etl", "job-0", 2, None, job="job")])
    assert (v.waits_on, v.rule) == ("placement", "kueue.fits_quota")


def test_namespace_selector_refuses_other_namespaces() -> None:
    """A ClusterQueue selecting ``kubernetes.io/metadata.name: team-z``: a pod of team-a
    (through a LocalQueue there) is inadmissible; team-z's fits; with no selector at
    all, no namespace is selected; with ``{}``, every one is."""
    selector = {"matchLabels": {"kubernetes.io/metadata.name": "team-z"}}
    objects = [
        cluster_queue("z", 8, namespace_selector=selector),
        local_queue("team-a", "z"), local_queue("team-z", "z"),
        namespace("team-a"), namespace("team-z"),
    ]  # fmt: skip
    pods = [pod("team-a", "a-0", 2, None, job="a", minute=1),
            pod("team-z", "z-0", 2, None, job="z", minute=2)]  # fmt: skip
    got = {v.namespace: (v.waits_on, v.rule) for v in _judge(objects, pods)}
    assert got == {"team-a": ("quota", "kueue.namespace_not_selected"),
                   "team-z": ("placement", "kueue.fits_quota")}  # fmt: skip
    objects[0] = cluster_queue("z", 8, namespace_selector=UNSET)
    assert {v.rule for v in _judge(objects, pods)} == {"kueue.namespace_not_selected"}
    objects[0] = cluster_queue("z", 8)
    assert {v.rule for v in _judge(objects, pods)} == {"kueue.fits_quota"}
    # a selector on a label of the Namespace objects
    objects[0] = cluster_queue("z", 8, namespace_selector={"matchLabels": {"tier": "gold"}})
    objects[3] = namespace("team-a", {"tier": "gold"})
    rules = {v.namespace: v.rule for v in _judge(objects, pods)}
    assert rules == {"team-a": "kueue.fits_quota", "team-z": "kueue.namespace_not_selected"}


def test_a_head_admitted_this_round_is_a_victim_in_the_verdict_never_in_a_finding() -> None:
    """``vision`` (nominal 4, reclaimWithinCohort Any) and ``batch`` (nominal 0) share a
    cohort; batch's high-priority 4-GPU job is the first head and borrows vision's unused
    quota; then vision's own job reclaims it. Kueue would do so in its next cycle, so the
    verdict names it; but that job is still a pending pod: the finding names no victim to
    evict and counts nothing reclaimable."""
    from datetime import datetime

    from gpuscope.analytics.queueing.quota import quota_analysis

    objects = [
        cluster_queue("vision", 4, "c", preemption={"reclaimWithinCohort": "Any"}),
        cluster_queue("batch", 0, "c"),
        local_queue("vision", "vision"), local_queue("batch", "batch"),
    ]  # fmt: skip
    pods = [pod("batch", "b-0", 4, None, job="b", minute=1, priority=9),
            pod("vision", "v-0", 4, None, job="v", minute=2)]  # fmt: skip
    quotas = quotas_from_objects(objects_from_documents([("o", kubectl_list(objects + pods))]))
    state = judge([pod_from_json(p) for p in pods], quotas)
    got = {v.job: [x.job for x in v.victims] for v in state.verdicts}
    assert got == {"Job/b": [], "Job/v": ["Job/b"]}
    found = quota_analysis(state, datetime(2026, 11, 23, 9), lambda: {})
    assert found.summary["total_reclaimable_gpus"] == 0
    assert all("victims" not in f.evidence for f in found.findings)
