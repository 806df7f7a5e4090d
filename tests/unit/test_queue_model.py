"""The queue model's rules one by one (docs/analytics.md, Queues), on objects as kubectl
prints them: Kueue lending limits, Cohort objects and their tree, v1beta2 field names,
withinClusterQueue, ResourceQuota as a hard cap, KAI limits and non-preemptible jobs."""

from __future__ import annotations

from typing import Any

from gpuscope.analytics.queueing.queues import QueueVerdict, judge
from gpuscope.collector.cluster.inventory_records import pod_from_json
from gpuscope.collector.cluster.queue_records import quotas_from_objects
from gpuscope.core.kube_objects import objects_from_documents
from tests.kueue_objects import GPU, KUEUE, cluster_queue, kubectl_list, local_queue, pod


def _judge(
    objects: list[dict[str, Any]], pods: list[dict[str, Any]], **kw: Any
) -> list[QueueVerdict]:
    quotas = quotas_from_objects(objects_from_documents([("o", kubectl_list(objects))]))
    return list(judge([pod_from_json(p) for p in pods], quotas, **kw).verdicts)


def _cohort(
    name: str, nominal: int = 0, parent: str | None = None, **limits: int
) -> dict[str, Any]:
    gpu: dict[str, Any] = {"name": GPU, "nominalQuota": nominal, **limits}
    spec: dict[str, Any] = {"resourceGroups": [{"coveredResources": [GPU], "flavors": [
        {"name": "default-flavor", "resources": [gpu]}]}]}  # fmt: skip
    if parent:
        spec["parent"] = parent
    return {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def test_lending_limit_keeps_the_rest_for_the_lender() -> None:
    """team-a (8 nominal, lendingLimit 2) uses nothing; team-b (0 nominal) may borrow
    only the 2 GPUs team-a lends: a 3-GPU job waits on quota, a 2-GPU job fits."""
    objects = [cluster_queue("team-a", 8, "ab", lending_limit=2), cluster_queue("team-b", 0, "ab"),
               local_queue("team-b", "team-b")]  # fmt: skip
    big = _judge(objects, [pod("team-b", "big", 3, None, job="big")])
    small = _judge(objects, [pod("team-b", "small", 2, None, job="small")])
    assert (big[0].waits_on, big[0].rule) == ("quota", "kueue.never_fits")
    assert (small[0].waits_on, small[0].rule) == ("placement", "kueue.fits_quota")


def test_borrowing_limit_caps_what_a_queue_takes_from_its_cohort() -> None:
    objects = [cluster_queue("team-a", 8, "ab"), cluster_queue("team-b", 2, "ab", borrowing_limit=3),
               local_queue("team-b", "team-b")]  # fmt: skip
    [v] = _judge(objects, [pod("team-b", "j", 6, None, job="j")])
    assert (v.waits_on, v.rule) == ("quota", "kueue.never_fits")
    [v] = _judge(objects, [pod("team-b", "j", 5, None, job="j")])
    assert v.waits_on == "placement"


def test_a_cohort_objects_own_quota_is_shared_by_its_tree() -> None:
    """ClusterQueues with no quota of their own under cohort ``research`` (whose parent
    ``org`` holds 8 GPUs): a 6-GPU job fits from the tree; a borrowingLimit of 4 on the
    child cohort stops it."""
    cqs = [cluster_queue("vision", 0, "research"), local_queue("vision", "vision")]
    job = [pod("vision", "j", 6, None, job="j")]
    [v] = _judge([*cqs, _cohort("research", parent="org"), _cohort("org", 8)], job)
    assert (v.waits_on, v.cohort) == ("placement", "research")
    limited = [*cqs, _cohort("research", parent="org", borrowingLimit=4), _cohort("org", 8)]
    [v] = _judge(limited, job)
    assert (v.waits_on, v.rule) == ("quota", "kueue.never_fits")


def test_v1beta2_cohort_name_and_parent_name() -> None:
    cq = cluster_queue("vision", 0)
    cq["apiVersion"] = "kueue.x-k8s.io/v1beta2"
    cq["spec"]["cohortName"] = "research"
    cohort = _cohort("research")
    cohort["apiVersion"] = "kueue.x-k8s.io/v1beta2"
    cohort["spec"]["parentName"] = "org"
    org = _cohort("org", 4)
    org["apiVersion"] = "kueue.x-k8s.io/v1beta2"
    [v] = _judge([cq, cohort, org, local_queue("vision", "vision")],
                 [pod("vision", "j", 4, None, job="j")])  # fmt: skip
    assert v.waits_on == "placement"


def test_within_cluster_queue_lower_or_newer_equal_priority() -> None:
    """A full queue (8 of 8, no cohort): the waiting job (priority 1, created at minute 30)
    may preempt the equal-priority job created after it, not the older one."""
    objects = [cluster_queue("team-a", 8, preemption={"withinClusterQueue": "LowerOrNewerEqualPriority"}),
               local_queue("team-a", "team-a")]  # fmt: skip
    pods = [pod("team-a", "old-0", 4, "n1", job="old", minute=10, priority=1),
            pod("team-a", "new-0", 4, "n1", job="new", minute=40, priority=1),
            pod("team-a", "wait-0", 4, None, job="wait", minute=30, priority=1)]  # fmt: skip
    [v] = _judge(objects, pods)
    assert (v.rule, [j.job for j in v.victims]) == ("kueue.withinClusterQueue", ["Job/new"])


def test_resourcequota_is_a_hard_cap() -> None:
    rq = {"apiVersion": "v1", "kind": "ResourceQuota",
          "metadata": {"name": "gpus", "namespace": "ml"},
          "spec": {"hard": {f"requests.{GPU}": "4"}}}  # fmt: skip
    pods = [pod("ml", "run-0", 3, "n1", job="run", queue=None),
            pod("ml", "wait-0", 2, None, job="wait", queue=None)]  # fmt: skip
    [v] = _judge([rq], pods)
    assert (v.project, v.waits_on, v.rule, v.victims) == (
        "ml",
        "quota",
        "resourcequota.hard_cap",
        (),
    )


def _kai(
    name: str, quota: int, limit: int = -1, weight: int = 1, parent: str = "root"
) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"parentQueue": parent, "resources": {
                "gpu": {"quota": quota, "limit": limit, "overQuotaWeight": weight},
                "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}}  # fmt: skip


def _kai_pod(
    queue: str, name: str, gpus: int, node: str | None, priority: int = 50, minute: int = 0
) -> dict[str, Any]:
    p = pod(queue, f"{name}-0", gpus, node, job=name, priority=priority, queue=None, minute=minute)
    p["metadata"]["labels"]["kai.scheduler/queue"] = queue
    return p


def test_kai_limit_and_non_preemptible_jobs() -> None:
    """b (quota 8) waits for 4 with no GPU free; a is 4 over its quota 4 but its job is an
    inference one (priority 125, not preemptible): nothing to reclaim. Of two train jobs
    (priority 50) the newer goes, whole; a single 8-GPU one goes too, though a drops below
    its quota: KAI's strategies (reclaimable/strategies.go) weigh what the queue holds
    *before* the victim leaves (8 over an allocatable share of 4). c's limit 2 holds back
    its 4-GPU job."""
    queues = [_kai("a", 4), _kai("b", 8), _kai("c", 0, limit=2)]
    serving = [_kai_pod("a", "serve", 8, "n1", priority=125), _kai_pod("b", "wait", 4, None)]
    [v] = _judge(queues, serving, free_gpus=0)
    assert (v.waits_on, v.rule, v.victims) == ("quota", "kai.reclaim_blocked", ())
    training = [_kai_pod("a", "train-1", 4, "n1", minute=0), _kai_pod("a", "train-2", 4, "n1", minute=5),
                _kai_pod("b", "wait", 4, None, minute=9)]  # fmt: skip
    [v] = _judge(queues, training, free_gpus=0)
    assert (v.rule, [j.job for j in v.victims]) == ("kai.reclaim", ["Job/train-2"])
    one_job = [_kai_pod("a", "train", 8, "n1"), _kai_pod("b", "wait", 4, None)]
    [v] = _judge(queues, one_job, free_gpus=0)
    assert (v.rule, [j.job for j in v.victims]) == ("kai.reclaim", ["Job/train"])
    [v] = _judge(queues, [_kai_pod("c", "big", 4, None)], free_gpus=16)
    assert (v.waits_on, v.rule) == ("quota", "kai.limit")


def test_a_missing_localqueue_is_inadmissible() -> None:
    """LocalQueues are known, but none named ``user-queue`` in namespace ml: Kueue does not
    admit the job; it is over no guarantee and nobody is preempted for it."""
    objects = [cluster_queue("team-a", 8), local_queue("team-a", "team-a")]
    [v] = _judge(objects, [pod("ml", "j-0", 2, None, job="j")])
    assert (v.project, v.scheduler, v.waits_on, v.rule) == (
        "ml/user-queue", "inadmissible", "quota", "kueue.inadmissible",
    )  # fmt: skip
