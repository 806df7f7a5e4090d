"""Issue 12's placement findings, each as the kubectl JSON a user would feed
``gpuscope analyze fragmentation|consolidation --nodes FILE --pods FILE``: the figures must
answer "could the scheduler place it now", with CPU, memory, cordons and taints counted."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuscope.analytics.base import Analysis
from gpuscope.analytics.consolidation.plan import Goal, Placed, plan_consolidation
from gpuscope.analytics.placement.allocation import NodeState, Task
from gpuscope.analytics.placement.fragmentation import TaskMix, learn_task_mix
from gpuscope.analytics.runner import run_on_snapshot
from gpuscope.analytics.trace import read_tasks
from gpuscope.core.settings import Settings

AT = datetime(2025, 1, 1, tzinfo=UTC)


def k8s_node(
    name: str,
    gpus: int,
    *,
    cpu: str = "104",
    memory: str = "512Gi",
    model: str = "Tesla-T4",
    cordoned: bool = False,
    ready: bool = True,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "nvidia.com/gpu": str(gpus), "pods": "110"}
    spec: dict[str, Any] = {"unschedulable": True} if cordoned else {}
    if taints:
        spec["taints"] = taints
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": model}},
        "spec": spec,
        "status": {
            "allocatable": alloc,
            "capacity": alloc,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def k8s_pod(
    name: str,
    node: str | None,
    *,
    gpus: int = 0,
    fraction: float | None = None,
    cpu: str = "1",
    memory: str = "1Gi",
    tolerations: list[dict[str, str]] | None = None,
    started: str = "2024-12-31T00:00:00Z",
) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    annotations = {"gpu-fraction": f"{fraction:g}"} if fraction is not None else {}
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"requests": requests}}],
        "tolerations": tolerations or [],
    }
    if node:
        spec["nodeName"] = node
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": name,
            "labels": {"gpuscope.io/workload-type": "batch", "gpuscope.io/preemptible": "true"},
            "annotations": annotations,
            "ownerReferences": [{"kind": "Job", "name": name, "controller": True}],
            "creationTimestamp": started,
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def analyze(
    tmp_path: Path, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], what: str
) -> Analysis:
    n, p = tmp_path / "nodes.json", tmp_path / "pods.json"
    n.write_text(json.dumps({"kind": "List", "items": nodes}))
    p.write_text(json.dumps({"kind": "List", "items": pods}))
    return run_on_snapshot(n, p, AT, Settings(), what)


# --- CPU ---------------------------------------------------------------------------------


def test_free_gpu_without_the_cpu_for_any_task_is_fragmented(tmp_path: Path) -> None:
    """One T4 node, 2 GPUs, 104 cores; a running 1-GPU pod holds 100 cores; three pending
    1-GPU pods ask 8 cores each: the free GPU has 4 cores beside it, so no task of the mix
    can use it (the old code gave nodes all their CPU and tasks none: ratio 0)."""
    nodes = [k8s_node("t4", 2, cpu="104")]
    pods = [k8s_pod("big", "t4", gpus=1, cpu="100")]
    pods += [k8s_pod(f"wait-{i}", None, gpus=1, cpu="8") for i in range(3)]
    result = analyze(tmp_path, nodes, pods, "fragmentation")
    s = result.summary
    assert s["free_gpus"] == 1.0
    assert s["fgd_fragmented_gpus"] == pytest.approx(1.0)
    assert s["fgd_fragmentation_ratio"] == pytest.approx(1.0)
    assert s["pending_gpu_tasks"] == 3 and s["pending_fit_now"] == 0
    assert s["pending_blocked_by"] == {"cpu": 3}
    [finding] = [f for f in result.findings if f.kind == "gpu_fragmentation"]
    assert finding.severity == "critical"


def test_memory_counts_like_cpu(tmp_path: Path) -> None:
    nodes = [k8s_node("t4", 2, memory="64Gi")]
    pods = [k8s_pod("big", "t4", gpus=1, memory="60Gi")]
    pods += [k8s_pod(f"wait-{i}", None, gpus=1, memory="8Gi") for i in range(3)]
    s = analyze(tmp_path, nodes, pods, "fragmentation").summary
    assert s["fgd_fragmentation_ratio"] == pytest.approx(1.0)
    assert s["pending_fit_now"] == 0
    assert s["pending_blocked_by"] == {"memory": 3}


# --- cordoned, NotReady, tainted ---------------------------------------------------------


@pytest.mark.parametrize(
    "closed",
    [
        k8s_node("closed", 8, cordoned=True),
        k8s_node("closed", 8, ready=False),
        k8s_node("closed", 8, taints=[{"key": "maint", "effect": "NoSchedule"}]),
    ],
    ids=["cordoned", "not-ready", "tainted"],
)
def test_unschedulable_capacity_is_not_placeable(tmp_path: Path, closed: dict[str, Any]) -> None:
    """A closed node with 8 free GPUs, a normal node with 2 free, a pending 8-GPU job: the
    largest placeable job is 2 and the job does not fit now (the old code: 8, fits)."""
    nodes = [closed, k8s_node("open", 8)]
    pods = [k8s_pod(f"run-{i}", "open", gpus=1) for i in range(6)]
    pods.append(k8s_pod("job", None, gpus=8))
    s = analyze(tmp_path, nodes, pods, "fragmentation").summary
    assert s["total_gpus"] == 16
    assert s["free_gpus"] == 2.0 and s["whole_free_gpus"] == 2
    assert s["unschedulable_free_gpus"] == 8.0 and s["unschedulable_nodes"] == 1
    assert s["largest_placeable_job_gpus"] == 2
    assert s["jobs_fit_now"]["8"] == 0
    assert s["pending_fit_now"] == 0
    # 2 usable GPUs on the open node: not enough even packed; the closed node's 8 don't count
    assert s["pending_blocked_by"] == {"capacity": 1}
    # FGD over the capacity the scheduler can use: the 2 free GPUs are fragment to an
    # 8-GPU job, the 1-GPU tasks use them; nothing of the closed node is counted
    assert s["fgd_fragmented_gpus"] <= s["free_gpus"]
    plan = analyze(tmp_path, nodes, pods, "consolidation").summary
    # the planner cannot put the job on the closed node either: it needs the open one freed
    assert plan["goals_met"] == 1 and plan["evictions_count"] == 6


def test_a_tolerated_taint_keeps_the_node_open(tmp_path: Path) -> None:
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    tolerate = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    nodes = [k8s_node("gpu", 8, taints=[taint])]
    pods = [k8s_pod("run", "gpu", gpus=2, tolerations=tolerate)]
    pods.append(k8s_pod("job", None, gpus=4, tolerations=tolerate))
    s = analyze(tmp_path, nodes, pods, "fragmentation").summary
    assert s["free_gpus"] == 6.0 and s["unschedulable_free_gpus"] == 0.0
    assert s["pending_fit_now"] == 1


def test_a_cordon_is_open_to_the_pod_that_tolerates_it(tmp_path: Path) -> None:
    """The consolidation executor cordons the node it frees and adds the
    ``node.kubernetes.io/unschedulable`` toleration to the pending pod: that pod may land
    there, as the scheduler would let it."""
    tolerate = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]
    nodes = [k8s_node("reserved", 8, cordoned=True), k8s_node("other", 8, cordoned=True)]
    pods = [k8s_pod("job", None, gpus=8, tolerations=tolerate)]
    s = analyze(tmp_path, nodes, pods, "fragmentation").summary
    assert s["pending_fit_now"] == 1 and s["largest_placeable_job_gpus"] == 8
    pods = [k8s_pod("job", None, gpus=8)]
    s = analyze(tmp_path, nodes, pods, "fragmentation").summary
    assert s["pending_fit_now"] == 0 and s["unschedulable_free_gpus"] == 16
    assert s["pending_blocked_by"] == {"closed": 1}


def test_blockers_name_fragmentation_and_models(tmp_path: Path) -> None:
    """Two nodes with 2 free GPUs each and a 4-GPU job: the GPUs are there, scattered
    (fragmentation); a job pinned to a model no node has waits on the model."""
    nodes = [k8s_node("a", 4), k8s_node("b", 4)]
    pods = [k8s_pod(f"{n}{i}", n, gpus=1) for n in "ab" for i in range(2)]
    pods.append(k8s_pod("job", None, gpus=4))
    pinned = k8s_pod("pinned", None, gpus=1)
    pinned["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100"}
    pods.append(pinned)
    s = analyze(tmp_path, nodes, pods, "fragmentation").summary
    assert s["pending_blocked_by"] == {"fragmentation": 1, "model": 1}


# --- fractions from kubectl files --------------------------------------------------------


def test_fractions_of_a_full_node_leave_nothing_free(tmp_path: Path) -> None:
    """A full 2-GPU node holding 0.4, 0.4, 0.3, 0.3, 0.3, 0.3: the scheduler packed them
    0.4 + 0.3 + 0.3 per GPU; best fit largest first ran out of room and showed 0.1 free."""
    nodes = [k8s_node("n", 2)]
    shares = [0.4, 0.4, 0.3, 0.3, 0.3, 0.3]
    pods = [k8s_pod(f"f{i}", "n", fraction=f) for i, f in enumerate(shares)]
    s = analyze(tmp_path, nodes, pods, "fragmentation").summary
    assert s["free_gpus"] == 0.0
    assert s["whole_free_gpus"] == 0
    assert s["node_free_gpus"] == {"n": 0.0}


def test_fractions_that_only_fit_one_way_are_packed_that_way(tmp_path: Path) -> None:
    """0.5, 0.5, 0.4, 0.3, 0.3 on two GPUs: spreading largest first leaves the last 0.3
    without room; the only valid packing is {0.5, 0.5} and {0.4, 0.3, 0.3}."""
    nodes = [k8s_node("n", 2)]
    shares = [0.5, 0.5, 0.4, 0.3, 0.3]
    pods = [k8s_pod(f"f{i}", "n", fraction=f) for i, f in enumerate(shares)]
    s = analyze(tmp_path, nodes, pods, "fragmentation").summary
    assert s["free_gpus"] == 0.0


# --- FGD task mix as frag.go ranks it ----------------------------------------------------


def test_task_mix_ties_go_to_the_larger_cpu_group() -> None:
    """Two groups of equal count and a coverage that keeps one: frag.go's reverse sort keeps
    the larger-CPU group (the old code kept the smaller)."""
    small = Task(cpu_milli=2000, gpu_count=1, gpu_share=1.0)
    large = Task(cpu_milli=8000, gpu_count=1, gpu_share=1.0)
    mix = learn_task_mix([small, large] * 5, coverage=0.5)
    assert [t.cpu_milli for t in mix.tasks] == [8000]
    # then the larger share, more GPUs, and the model text in reverse order
    half = Task(cpu_milli=1000, gpu_count=1, gpu_share=0.5)
    whole = Task(cpu_milli=1000, gpu_count=1, gpu_share=1.0)
    assert learn_task_mix([half, whole], coverage=0.5).tasks[0].gpu_share == 1.0
    a = Task(cpu_milli=1000, gpu_count=1, gpu_share=1.0, gpu_spec="A", gpu_models=frozenset("A"))
    b = Task(cpu_milli=1000, gpu_count=1, gpu_share=1.0, gpu_spec="B", gpu_models=frozenset("B"))
    assert learn_task_mix([a, b], coverage=0.5).tasks[0].gpu_spec == "B"


def test_duplicate_model_lists_are_distinct_task_types(tmp_path: Path) -> None:
    """frag.go keys task types by the GPU-type text: ``V100M16|V100M32|V100M32`` and
    ``V100M16|V100M32`` are two types (the old code merged them into one set)."""
    path = tmp_path / "pods.csv"
    path.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        "a,1000,1,1,500,V100M16|V100M32|V100M32\n"
        "b,1000,1,1,500,V100M16|V100M32|V100M32\n"
        "c,1000,1,1,500,V100M16|V100M32\n"
    )
    mix: TaskMix = learn_task_mix(read_tasks(path))
    assert len(mix.tasks) == 2
    assert mix.weights == pytest.approx((2 / 3, 1 / 3))
    assert all(t.gpu_models == {"V100M16", "V100M32"} for t in mix.tasks)


# --- the planner -------------------------------------------------------------------------


def test_tie_break_prefers_a_victim_that_can_be_re_placed() -> None:
    """A 1-GPU job; evicting either the whole-GPU pod on n0 or the half-GPU pod on n1
    makes room at one eviction and the same GPU-hours. Only the half-GPU pod has somewhere
    to go (n2's free half): the old tie-break by name sent the whole-GPU pod to pending."""
    nodes = [
        NodeState("n0", gpus=(0.0,)),
        NodeState("n1", gpus=(0.5,)),
        NodeState("n2", gpus=(0.5,)),
    ]
    placed = [
        Placed("ns", "whole", "n0", (0,), 1.0, True, "", 0.1),
        Placed("ns", "half", "n1", (0,), 0.5, True, "", 0.1),
        Placed("ns", "fixed", "n2", (0,), 0.5, False, "interactive", 0.1),
    ]
    plan = plan_consolidation(nodes, placed, [Goal("pending_job", gpus=1, label="job")])
    assert plan.goals_met == 1
    assert [(m.pod, m.to_node) for m in plan.moves] == [("half", "n2")]


def test_planner_needs_the_cpu_where_it_places_the_job(tmp_path: Path) -> None:
    """Evicting the young pod on n0 frees 2 GPUs, but n0 keeps 6 cores for an 8-core job;
    n1 has the cores. The old planner chose n0 (fewest GPU-hours lost) and planned a
    placement the scheduler refuses."""
    nodes = [k8s_node("n0", 2, cpu="10"), k8s_node("n1", 2, cpu="64")]
    pods = [
        k8s_pod("young", "n0", gpus=1, cpu="4", started="2024-12-31T23:00:00Z"),
        k8s_pod("sidecar", "n0", cpu="4"),
        k8s_pod("old", "n1", gpus=1, cpu="4", started="2024-12-30T00:00:00Z"),
        k8s_pod("job", None, gpus=2, cpu="8"),
    ]
    result = analyze(tmp_path, nodes, pods, "consolidation")
    [finding] = result.findings
    assert finding.recommendation is not None
    assert finding.recommendation["target"]["nodes"] == ["n1"]
    assert result.summary["evictions"] == ["team/old"]
    # the evicted pod is re-placed only where its 4 cores fit: n0 has 2 free
    assert [(m["pod"], m["to_node"]) for m in result.summary["moves"]] == [("old", "")]
