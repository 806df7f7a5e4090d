"""Minimal cases of Kueue's flavor assignment over several GPU flavors in one ClusterQueue
(docs/analytics.md, Queues, "Kueue flavors"): each failed while gpuscope added a queue's
flavors up."""

from __future__ import annotations

from typing import Any

from gpuscope.analytics.queueing.queues import QueueVerdict, judge
from gpuscope.collector.cluster.inventory_records import node_from_json, pod_from_json
from gpuscope.collector.cluster.queue_records import quotas_from_objects
from gpuscope.core.kube_objects import objects_from_documents
from tests.kueue_objects import (
    GPU,
    cluster_queue,
    kubectl_list,
    local_queue,
    node,
    pod,
    resource_flavor,
)

PRODUCT = "nvidia.com/gpu.product"


def _flavor(name: str, model: str | None, taint: bool = False) -> dict[str, Any]:
    rf = resource_flavor(name)
    if model:
        rf["spec"]["nodeLabels"] = {PRODUCT: model}
    if taint:
        rf["spec"]["nodeTaints"] = [{"key": "spot", "value": "true", "effect": "NoSchedule"}]
    return rf


def _queue(
    flavors: list[tuple[str, int]],
    cohort: str | None = None,
    fungibility: tuple[str, str] | None = None,
    preemption: dict[str, Any] | None = None,
    name: str = "team",
) -> dict[str, Any]:
    cq = cluster_queue(name, 0, cohort, preemption=preemption)
    group = cq["spec"]["resourceGroups"][0]
    group["coveredResources"] = [GPU]
    group["flavors"] = [
        {"name": f, "resources": [{"name": GPU, "nominalQuota": n}]} for f, n in flavors
    ]
    if fungibility:
        cq["spec"]["flavorFungibility"] = {
            "whenCanBorrow": fungibility[0],
            "whenCanPreempt": fungibility[1],
        }
    return cq


def _judge(
    objects: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    selector: dict[str, str] | None = None,
) -> QueueVerdict:
    """The verdict of the one pending pod (given ``selector`` as its nodeSelector)."""
    for p in pods:
        if selector and not p["spec"].get("nodeName"):
            p["spec"]["nodeSelector"] = selector
    nodes = [
        node_from_json(node("h100-0", model="H100")),
        node_from_json(node("a100-0", model="A100")),
    ]
    quotas = quotas_from_objects(objects_from_documents([("o", kubectl_list(objects))]))
    state = judge(
        [pod_from_json(p) for p in pods],
        quotas,
        node_labels={n.name: dict(n.labels) for n in nodes},
    )
    (verdict,) = state.verdicts
    return verdict


FLAVORS = [_flavor("h100", "H100"), _flavor("a100", "A100")]


def test_a_job_bigger_than_any_one_flavor_never_fits() -> None:
    """4 + 4 GPUs in two flavors: a 6-GPU job fits neither (the sum admitted it)."""
    objects = [*FLAVORS, _queue([("h100", 4), ("a100", 4)]), local_queue("team", "team")]
    v = _judge(objects, [pod("team", "big-0", 6, None, job="big")])
    assert v.rule == "kueue.never_fits" and v.flavor == ""
    assert "flavor h100" in v.reason and "flavor a100" in v.reason


def test_a_full_first_flavor_sends_the_job_to_the_next() -> None:
    """h100 is used up by a pod on an H100 node: the job is admitted to a100."""
    objects = [*FLAVORS, _queue([("h100", 4), ("a100", 8)]), local_queue("team", "team")]
    pods = [
        pod("team", "run-0", 4, "h100-0", job="run"),
        pod("team", "wait-0", 4, None, job="wait", minute=5),
    ]
    v = _judge(objects, pods)
    assert (v.rule, v.flavor) == ("kueue.fits_quota", "a100")
    assert "in flavor a100" in v.reason


def test_a_pod_pinned_to_a_product_no_flavor_has_is_never_admitted() -> None:
    objects = [*FLAVORS, _queue([("h100", 8)]), local_queue("team", "team")]
    v = _judge(objects, [pod("team", "wait-0", 1, None, job="wait")], {PRODUCT: "A100"})
    assert v.rule == "kueue.no_matching_flavor"
    assert "flavor h100 doesn't match node affinity" in v.reason


def test_a_pin_picks_the_later_flavor() -> None:
    objects = [*FLAVORS, _queue([("h100", 8), ("a100", 8)]), local_queue("team", "team")]
    v = _judge(objects, [pod("team", "wait-0", 1, None, job="wait")], {PRODUCT: "A100"})
    assert (v.rule, v.flavor) == ("kueue.fits_quota", "a100")


def test_an_untolerated_flavor_taint_skips_the_flavor() -> None:
    objects = [
        _flavor("spot", None, taint=True),
        _flavor("a100", "A100"),
        _queue([("spot", 8), ("a100", 8)]),
        local_queue("team", "team"),
    ]
    v = _judge(objects, [pod("team", "wait-0", 1, None, job="wait")])
    assert v.flavor == "a100"


def _borrowing_setup(fungibility: tuple[str, str] | None) -> QueueVerdict:
    """team has 0 h100 (its cohort lends 8 through lender) and 4 a100 of its own."""
    objects = [
        *FLAVORS,
        _queue([("h100", 0), ("a100", 4)], "pool", fungibility),
        _queue([("h100", 8), ("a100", 0)], "pool", name="lender"),
        local_queue("team", "team"),
    ]
    return _judge(objects, [pod("team", "wait-0", 4, None, job="wait")])


def test_when_can_borrow_borrow_stops_at_the_first_flavor_that_fits_by_borrowing() -> None:
    v = _borrowing_setup(None)  # Kueue's default: whenCanBorrow Borrow
    assert (v.rule, v.flavor) == ("kueue.fits_quota", "h100")
    assert "borrowing from cohort pool" in v.reason


def test_when_can_borrow_try_next_flavor_prefers_a_flavor_without_borrowing() -> None:
    v = _borrowing_setup(("TryNextFlavor", "TryNextFlavor"))
    assert (v.rule, v.flavor) == ("kueue.fits_quota", "a100")


def test_preemption_happens_in_the_flavor_the_victim_runs_in() -> None:
    """h100 and a100 both full; the low-priority job runs on the A100 node: the pending
    job preempts it in a100 (withinClusterQueue LowerPriority)."""
    objects = [
        *FLAVORS,
        _queue([("h100", 4), ("a100", 4)], preemption={"withinClusterQueue": "LowerPriority"}),
        local_queue("team", "team"),
    ]
    pods = [
        pod("team", "hi-0", 4, "h100-0", job="hi", priority=5),
        pod("team", "lo-0", 4, "a100-0", job="lo", priority=0),
        pod("team", "wait-0", 4, None, job="wait", minute=5, priority=5),
    ]
    v = _judge(objects, pods)
    assert (v.rule, v.flavor) == ("kueue.withinClusterQueue", "a100")
    assert [x.job for x in v.victims] == ["Job/lo"]


def _two_preemptions(fungibility: tuple[str, str]) -> QueueVerdict:
    """Both flavors full; team may preempt its own low-priority job in either: in h100
    (nominal 2) it then borrows 2 from lender, in a100 (nominal 4) it does not."""
    preemption = {
        "withinClusterQueue": "LowerPriority",
        "reclaimWithinCohort": "LowerPriority",
        "borrowWithinCohort": {"policy": "LowerPriority"},
    }
    objects = [
        *FLAVORS,
        _queue([("h100", 2), ("a100", 4)], "pool", fungibility, preemption),
        _queue([("h100", 4), ("a100", 0)], "pool", name="lender"),
        local_queue("team", "team"),
        local_queue("lender", "lender"),
    ]
    pods = [
        pod("team", "lo-h-0", 4, "h100-0", job="lo-h", priority=0),
        pod("lender", "own-0", 2, "h100-0", job="own", priority=5),
        pod("team", "lo-a-0", 4, "a100-0", job="lo-a", priority=0),
        pod("team", "wait-0", 4, None, job="wait", minute=5, priority=5),
    ]
    return _judge(objects, pods)


def test_between_two_preemptions_the_one_that_does_not_borrow_wins() -> None:
    """isPreferred: same mode, not borrowing first (whenCanPreempt TryNextFlavor)."""
    v = _two_preemptions(("TryNextFlavor", "TryNextFlavor"))
    assert (v.flavor, [x.job for x in v.victims]) == ("a100", ["Job/lo-a"])


def test_when_can_preempt_preempt_with_borrow_stops_at_the_first_preemption() -> None:
    v = _two_preemptions(("Borrow", "Preempt"))
    assert (v.flavor, [x.job for x in v.victims]) == ("h100", ["Job/lo-h"])
