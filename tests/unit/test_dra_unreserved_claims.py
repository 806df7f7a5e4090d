"""Issue 37, "An allocated claim that no running pod reserves counts as free": kube-scheduler's
allocated-devices tracker (``pkg/scheduler/framework/plugins/dynamicresources/
allocateddevices.go``) adds every device of a claim the moment ``status.allocation`` is set
and removes it only when the allocation is cleared or the claim deleted; ``reservedFor``
plays no part. So a standalone claim allocated with ``reservedFor: []``, or naming a pod
that is gone, keeps its devices taken."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuscope.analytics.consolidation.plan import analyze_consolidation
from gpuscope.analytics.placement.allocation import state_from_records
from gpuscope.analytics.placement.allocation_sources import kubectl_records
from gpuscope.analytics.placement.fragmentation import analyze_fragmentation
from gpuscope.analytics.queueing.queues import judge
from gpuscope.core.settings import AnalyticsSettings
from tests.fakes import dra_objects as d
from tests.unit.test_dra import H100, objset

AT = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)


def cluster(*, pending: int = 0) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """The issue's minimal case: one DRA-only node with 8 H100s and two standalone claims
    with ``status.allocation``, one reserved for nobody (gpu-0), one reserved for a pod
    that no longer exists (gpu-1); ``pending``: a pending pod asking for that many GPUs
    through a template."""
    node = d.node("dra-0")
    gpus = [d.gpu_device(i, f"GPU-{i:04d}", H100) for i in range(8)]
    pods = []
    if pending:
        pods.append(d.pod("ml", "wait-0", node=None, claims=[("gpus", None, "many")]))
    objects = objset(
        *d.nvidia_classes(),
        d.resource_slice("dra-0", gpus),
        d.template("ml", "many", [d.request("gpus", "gpu.nvidia.com", count=max(1, pending))]),
        d.claim("ml", "orphan", [d.request("gpu", "gpu.nvidia.com")],
                [d.result("gpu", "dra-0", "gpu-0")], reserved_for=[]),
        d.claim("ml", "left-behind", [d.request("gpu", "gpu.nvidia.com")],
                [d.result("gpu", "dra-0", "gpu-1")],
                reserved_for=[("gone-0", "uid-of-a-deleted-pod")]),
    )  # fmt: skip
    return d.kube_list([node]), d.kube_list(pods), objects


def test_allocated_claims_without_a_running_pod_keep_their_devices() -> None:
    nodes, pods, objects = cluster()
    node_infos, pod_infos, known = kubectl_records(nodes, pods, None, objects)
    state = state_from_records(node_infos, pod_infos, known)
    (node,) = state.nodes
    assert node.gpus == (0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    s = analyze_fragmentation(state, at=AT, settings=AnalyticsSettings()).summary
    assert (s["total_gpus"], s["free_gpus"], s["whole_free_gpus"]) == (8, 6, 6)
    # the holders are no workload: not a running task, not charged to a queue
    assert not state.running
    verdicts = judge(pod_infos, [])
    assert all(p.used == 0 for p in verdicts.projects.values()), verdicts.projects


def test_the_planner_neither_moves_the_claims_nor_counts_their_gpus_free() -> None:
    """A pending 8-GPU job cannot be made to fit: the two GPUs stay taken whatever moves."""
    nodes, pods, objects = cluster(pending=8)
    node_infos, pod_infos, known = kubectl_records(nodes, pods, None, objects)
    plan = analyze_consolidation(
        state_from_records(node_infos, pod_infos, known),
        pod_infos,
        at=AT,
        settings=AnalyticsSettings(),
        gpu_indices=known,
    ).summary
    assert plan["goals_met"] == 0 and plan["evictions"] == []
    assert plan["movable_pods"] == 0
