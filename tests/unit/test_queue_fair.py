"""Minimal cases of Kueue's fair sharing (docs/analytics.md, Queues, "Kueue fair
sharing"): the same cluster judged with classic preemption and with each strategy."""

from __future__ import annotations

from typing import Any

from gpuscope.analytics.queueing.queue_fair import FairSharing, Shares
from gpuscope.analytics.queueing.queue_flavors import Flavors
from gpuscope.analytics.queueing.queues import QueueVerdict, judge
from gpuscope.collector.cluster.inventory_records import pod_from_json
from gpuscope.collector.cluster.queue_records import quotas_from_objects
from gpuscope.core.kube_objects import objects_from_documents
from tests.kueue_objects import cluster_queue, kubectl_list, local_queue, pod

S2A, S2B = "LessThanOrEqualToFinalShare", "LessThanInitialShare"


def _objects(weight_b: str | None) -> list[dict[str, Any]]:
    """Cohort pool: a, b and c with 2 GPUs each (6 in all); b may reclaim anything."""
    out = []
    for name in ("a", "b", "c"):
        cq = cluster_queue(name, 2, "pool", preemption={"reclaimWithinCohort": "Any"})
        if name == "b" and weight_b is not None:
            cq["spec"]["fairSharing"] = {"weight": weight_b}
        out += [cq, local_queue(name, name)]
    return out


def _pods() -> list[dict[str, Any]]:
    """a runs 4 GPUs (2 borrowed), b its own 2, and b's 2-GPU job waits (it would borrow)."""
    return [
        pod("a", "a1-0", 2, "n0", job="a1", minute=1),
        pod("a", "a2-0", 2, "n0", job="a2", minute=2),
        pod("b", "b1-0", 2, "n1", job="b1", minute=3),
        pod("b", "wait-0", 2, None, job="wait", minute=4),
    ]


def _verdict(weight_b: str | None, fair: FairSharing | None) -> QueueVerdict:
    quotas = quotas_from_objects(objects_from_documents([("o", kubectl_list(_objects(weight_b)))]))
    (v,) = judge([pod_from_json(p) for p in _pods()], quotas, fair_sharing=fair).verdicts
    return v


def test_classic_preemption_never_lets_a_borrowing_queue_reclaim() -> None:
    v = _verdict("2", None)
    assert v.victims == () and v.rule == "kueue.preemption_insufficient"


def test_a_heavier_queue_takes_back_from_one_borrowing_more_by_less_than_initial_share() -> None:
    """b (weight 2) with the job borrows 2 of 6 GPUs: share 333 / 2 = 166; a borrows 2 at
    weight 1: 333. S2-a fails (a's share after losing a job is 0), S2-b passes (166 < 333):
    one of a's jobs, the most recently admitted, is preempted."""
    v = _verdict("2", FairSharing(True, (S2A, S2B)))
    assert v.rule == "kueue.fairSharing"
    assert [x.job for x in v.victims] == ["Job/a2"]


def test_less_than_or_equal_to_final_share_alone_preempts_nobody_here() -> None:
    v = _verdict("2", FairSharing(True, (S2A,)))
    assert v.victims == () and v.rule == "kueue.preemption_insufficient"


def test_equal_weights_give_equal_shares_and_no_preemption() -> None:
    v = _verdict(None, FairSharing(True, (S2A, S2B)))
    assert v.victims == ()


def test_dominant_resource_share_follows_kueues_integer_arithmetic() -> None:
    """333 per mille borrowed (2 of 6), per weight: 1 -> 333, 0.5 -> 666; weight 0 -> the
    largest, borrowing or not (that release checks the weight first); a cohort root has 0,
    and so has a queue within its quota."""
    quotas = quotas_from_objects(objects_from_documents([("o", kubectl_list(_objects("0.5")))]))
    cqs = {q.project: q for q in quotas if q.source == "kueue"}
    flavors = Flavors(cqs, [], [])
    tree = flavors.tree("default-flavor")
    tree.add_usage("a", 4)
    tree.add_usage("b", 4)
    shares = Shares(flavors, {("cq", "a"): 1.0, ("cq", "b"): 0.5, ("cq", "c"): 0.0})
    assert shares.share(("cq", "a")) == 333
    assert shares.share(("cq", "b")) == 666
    assert shares.share(("cq", "c")) == 2**63 - 1
    assert Shares(flavors, {}).share(("cq", "c")) == 0
    assert shares.share(("cohort", "pool")) == 0


def _cohort(name: str, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                            "flavors": [{"name": "default-flavor", "resources": [
                                {"name": "nvidia.com/gpu", "nominalQuota": 0}]}]}]}  # fmt: skip
    if parent:
        spec["parent"] = parent
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Cohort",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def test_a_cohort_wins_a_tie_with_a_queue_in_the_walk_from_the_root() -> None:
    """Cohort org holds p (4 GPUs), x (2) and cohort sub, which holds y (2): 8 in all. x and
    y each run two 2-GPU jobs, so x and sub each borrow 2 of 8 (share 250). p's 2-GPU
    job needs a victim: ordering.go descends into the cohort on a tie, so y's newest job
    goes, not x's."""
    objects = [_cohort("org"), _cohort("sub", "org")]
    for name, nominal, cohort in (("p", 4, "org"), ("x", 2, "org"), ("y", 2, "sub")):
        cq = cluster_queue(name, nominal, cohort, preemption={"reclaimWithinCohort": "Any"})
        objects += [cq, local_queue(name, name)]
    pods = [
        pod("x", "x1-0", 2, "n0", job="x1", minute=1),
        pod("x", "x2-0", 2, "n0", job="x2", minute=2),
        pod("y", "y1-0", 2, "n1", job="y1", minute=3),
        pod("y", "y2-0", 2, "n1", job="y2", minute=4),
        pod("p", "wait-0", 2, None, job="wait", minute=5),
    ]
    quotas = quotas_from_objects(objects_from_documents([("o", kubectl_list(objects))]))
    (v,) = judge(
        [pod_from_json(p) for p in pods], quotas, fair_sharing=FairSharing(True, (S2A, S2B))
    ).verdicts
    assert (v.rule, [x.namespace + "/" + x.job for x in v.victims]) == (
        "kueue.fairSharing",
        ["y/Job/y2"],
    )
