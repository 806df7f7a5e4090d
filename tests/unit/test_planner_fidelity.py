"""Issue 21's "What was seen" for the consolidation planner and the demand model, each as
the kubectl JSON a user feeds ``gpuscope analyze fragmentation|consolidation --nodes FILE
--pods FILE``: the planner takes the constraints the fragmentation detector takes (GPU-model
pins, node selectors, taints, MIG profiles), may move CPU-only pods, and pending MIG pods
are demand; KAI's GPU groups place fractions; memory is compared in bytes' worth."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuscope.analytics.base import Analysis
from gpuscope.analytics.runner import run_on_snapshot
from gpuscope.core.settings import Settings

AT = datetime(2025, 1, 1, tzinfo=UTC)


def node(
    name: str,
    *,
    gpus: int = 0,
    model: str = "",
    cpu: str = "104",
    memory: str = "512Gi",
    mig: dict[str, int] | None = None,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A Node as ``kubectl get nodes -o json`` shows it (the fields gpuscope reads)."""
    alloc: dict[str, str] = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    for profile, count in (mig or {}).items():
        alloc[f"nvidia.com/mig-{profile}"] = str(count)
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if model:
        all_labels["nvidia.com/gpu.product"] = model
    spec: dict[str, Any] = {"taints": taints} if taints else {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": spec,
        "status": {
            "allocatable": alloc,
            "capacity": alloc,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(
    name: str,
    on: str | None,
    *,
    gpus: int = 0,
    cpu: str = "1",
    memory: str = "1Gi",
    mig: dict[str, int] | None = None,
    kind: str = "batch",
    namespace: str = "team",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    affinity: dict[str, Any] | None = None,
    tolerations: list[dict[str, str]] | None = None,
    owner: str = "Job",
) -> dict[str, Any]:
    """A Pod as ``kubectl get pods -A -o json`` shows it; ``kind`` batch pods are
    preemptible (movable), notebooks are interactive."""
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    for profile, count in (mig or {}).items():
        requests[f"nvidia.com/mig-{profile}"] = str(count)
    meta_labels = {"gpuscope.io/workload-type": kind, **(labels or {})}
    if kind == "batch":
        meta_labels["gpuscope.io/preemptible"] = "true"
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"requests": requests}}],
        "tolerations": tolerations or [],
    }
    if on:
        spec["nodeName"] = on
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = affinity
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": meta_labels,
            "annotations": annotations or {},
            "ownerReferences": [{"kind": owner, "name": name, "controller": True}],
            "creationTimestamp": "2024-12-31T00:00:00Z",
        },
        "spec": spec,
        "status": {"phase": "Running" if on else "Pending"},
    }


def analyze(
    tmp_path: Path, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], what: str
) -> Analysis:
    n, p = tmp_path / "nodes.json", tmp_path / "pods.json"
    n.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
    p.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    return run_on_snapshot(n, p, AT, Settings(), what)


# --- the GPU-model pin ---------------------------------------------------------------------

H100_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["H100"]}
                    ]
                }
            ]
        }
    }
}


@pytest.mark.parametrize(
    "pin",
    [{"node_selector": {"nvidia.com/gpu.product": "H100"}}, {"affinity": H100_AFFINITY}],
    ids=["nodeSelector", "required-affinity"],
)
def test_planner_keeps_a_pending_jobs_gpu_model_pin(tmp_path: Path, pin: dict[str, Any]) -> None:
    """An A100 node with 8 free GPUs, an H100 node filled by a notebook, a pending 8-GPU
    job pinned to H100: the goal cannot be met (the notebook may not move), and it is
    never placed on the A100 node, as the fragmentation detector says."""
    nodes = [node("a100", gpus=8, model="A100"), node("h100", gpus=8, model="H100")]
    pods = [
        pod("nb", "h100", gpus=8, kind="interactive", owner="Notebook"),
        pod("train", None, gpus=8, **pin),
    ]
    plan = analyze(tmp_path, nodes, pods, "consolidation").summary
    assert plan["goals_met"] == 0
    assert plan["evictions_count"] == 0
    assert [u["goal"] for u in plan["unplaceable"]] == ["team/train"]
    frag = analyze(tmp_path, nodes, pods, "fragmentation").summary
    assert frag["pending_fit_now"] == 0


def test_planner_evicts_on_the_pinned_model_only(tmp_path: Path) -> None:
    """Where the H100 holds a movable job, that job is the one evicted; the A100's free
    GPUs are not the answer."""
    nodes = [node("a100", gpus=8, model="A100"), node("h100", gpus=8, model="H100")]
    pods = [
        pod("old", "h100", gpus=8),
        pod("train", None, gpus=8, node_selector={"nvidia.com/gpu.product": "H100"}),
    ]
    result = analyze(tmp_path, nodes, pods, "consolidation")
    plan = result.summary
    assert plan["goals_met"] == 1
    assert plan["evictions"] == ["team/old"]
    [finding] = result.findings
    assert finding.recommendation is not None
    assert finding.recommendation["target"]["nodes"] == ["h100"]


def test_planner_keeps_other_label_selectors_and_taints(tmp_path: Path) -> None:
    """A selector on another label (the pool) and a taint the job does not tolerate: the
    only node it may use is the one its selector names and whose taint it tolerates."""
    taint = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    nodes = [
        node("free-wrong-pool", gpus=4, labels={"pool": "b"}),
        node("free-tainted", gpus=4, labels={"pool": "a"}, taints=taint),
        node("busy", gpus=4, labels={"pool": "a"}),
    ]
    pods = [
        pod("old", "busy", gpus=4),
        pod("job", None, gpus=4, node_selector={"pool": "a"}),
    ]
    plan = analyze(tmp_path, nodes, pods, "consolidation").summary
    assert plan["goals_met"] == 1
    assert plan["evictions"] == ["team/old"]
    # the evicted pod has no selector: it moves to a free node it tolerates
    [move] = plan["moves"]
    assert move["to_node"] == "free-wrong-pool"


# --- CPU-only pods in the way ----------------------------------------------------------------


def test_planner_evicts_a_cpu_only_pod_holding_the_cpu(tmp_path: Path) -> None:
    """One node, 8 GPUs and 32 CPUs; a preemptible batch pod without GPUs uses 30 CPUs; a
    pending job asks 8 GPUs and 8 CPUs: the batch pod is the one to evict."""
    nodes = [node("n1", gpus=8, cpu="32")]
    pods = [pod("cpu-batch", "n1", cpu="30"), pod("job", None, gpus=8, cpu="8")]
    frag = analyze(tmp_path, nodes, pods, "fragmentation").summary
    assert frag["pending_blocked_by"] == {"cpu": 1}
    plan = analyze(tmp_path, nodes, pods, "consolidation").summary
    assert plan["movable_pods"] == 1
    assert plan["goals_met"] == 1
    assert plan["evictions"] == ["team/cpu-batch"]
    assert plan["moves"][0]["to_node"] == ""  # nowhere else to go: back to the queue


def test_cpu_only_pod_moves_to_a_node_without_gpus(tmp_path: Path) -> None:
    """A node without GPUs takes the evicted CPU-only pod: a move, not a re-queue."""
    nodes = [node("n1", gpus=8, cpu="32"), node("cpu-node", cpu="64")]
    pods = [pod("cpu-batch", "n1", cpu="30"), pod("job", None, gpus=8, cpu="8")]
    plan = analyze(tmp_path, nodes, pods, "consolidation").summary
    assert plan["evictions"] == ["team/cpu-batch"]
    assert plan["moves"][0]["to_node"] == "cpu-node"


def test_daemonset_pods_never_move(tmp_path: Path) -> None:
    nodes = [node("n1", gpus=8, cpu="32")]
    pods = [
        pod("agent", "n1", cpu="30", owner="DaemonSet"),
        pod("job", None, gpus=8, cpu="8"),
    ]
    plan = analyze(tmp_path, nodes, pods, "consolidation").summary
    assert plan["movable_pods"] == 0
    assert plan["goals_met"] == 0


# --- MIG demand ----------------------------------------------------------------------------


def mig_case() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [
        node("mig-node", model="A100", mig={"1g.10gb": 14}),
        node("plain", gpus=2, model="A100"),
    ]
    pods = [pod(f"m{i}", "mig-node", mig={"1g.10gb": 1}, kind="inference") for i in range(4)]
    pods += [
        pod("small", None, mig={"1g.10gb": 1}),
        pod("large", None, mig={"3g.40gb": 1}),
    ]
    return nodes, pods


def test_pending_mig_pods_are_demand(tmp_path: Path) -> None:
    """A node offering 14 ``1g.10gb`` instances (4 used) and a plain 2-GPU node; pending
    pods ask ``1g.10gb`` (fits) and ``3g.40gb`` (no node offers it)."""
    nodes, pods = mig_case()
    result = analyze(tmp_path, nodes, pods, "fragmentation")
    s = result.summary
    assert s["pending_tasks"] == 2
    assert s["pending_gpu_tasks"] == 2
    assert s["pending_fit_now"] == 1
    assert s["pending_blocked_by"] == {"mig_profile": 1}
    # the running MIG pods and the pending ones are the task mix
    assert s["task_mix"]["tasks_seen"] == 6
    assert s["mig_instances_free"] == 10
    # to a MIG-only workload the plain node's whole GPUs are of no use: FGD says so
    assert [f.kind for f in result.findings] == ["gpu_fragmentation"]


def test_pending_mig_pods_are_consolidation_goals(tmp_path: Path) -> None:
    nodes, pods = mig_case()
    result = analyze(tmp_path, nodes, pods, "consolidation")
    plan = result.summary
    assert plan["goals"] == 2
    assert plan["goals_met"] == 1
    assert plan["unplaceable"] == [
        {"goal": "team/large", "reason": "no node offers MIG profile 3g.40gb"}
    ]
    [finding] = result.findings
    assert finding.subject == {"goal": "team/small"}


def test_planner_evicts_a_mig_pod_for_a_mig_job(tmp_path: Path) -> None:
    """Every instance taken, one by a movable batch pod: the MIG job's goal evicts it."""
    nodes = [node("mig-node", model="A100", mig={"1g.10gb": 2})]
    pods = [
        pod("keep", "mig-node", mig={"1g.10gb": 1}, kind="inference"),
        pod("batch", "mig-node", mig={"1g.10gb": 1}),
        pod("want", None, mig={"1g.10gb": 1}),
    ]
    plan = analyze(tmp_path, nodes, pods, "consolidation").summary
    assert plan["goals_met"] == 1
    assert plan["evictions"] == ["team/batch"]


# --- KAI / Run:ai GPU groups ---------------------------------------------------------------


def reservation(name: str, on: str, group: str, index: str | None, ns: str) -> dict[str, Any]:
    """KAI's reservation pod: one whole GPU from the device plugin, the group label, the
    GPU it got in ``run.ai/reserve_for_gpu_index``."""
    annotations = {"run.ai/reserve_for_gpu_index": index} if index is not None else {}
    return pod(
        name,
        on,
        gpus=1,
        cpu="2m",
        memory="20Mi",
        kind="unknown",
        namespace=ns,
        labels={"app": "kai-resource-reservation", "runai-gpu-group": group},
        annotations=annotations,
        owner="",
    )


def fraction(name: str, on: str, share: float, group: str) -> dict[str, Any]:
    return pod(
        name,
        on,
        annotations={"gpu-fraction": f"{share:g}"},
        labels={"runai-gpu-group": group},
        kind="inference",
    )


@pytest.mark.parametrize(
    ("ns", "index"),
    [("kai-resource-reservation", "GPU-5d7a1c2e"), ("runai-reservation", "1")],
)
def test_fractions_of_one_kai_group_share_one_gpu(tmp_path: Path, ns: str, index: str) -> None:
    """Two 0.3 fractions in one GPU group on a 2-GPU node, with KAI's reservation pod: one
    GPU holds both, the other is whole and free, and a 1-GPU job fits now."""
    nodes = [node("n1", gpus=2)]
    pods = [
        reservation("gpu-reservation-n1-abcde", "n1", "g1", index, ns),
        fraction("a", "n1", 0.3, "g1"),
        fraction("b", "n1", 0.3, "g1"),
        pod("job", None, gpus=1),
    ]
    s = analyze(tmp_path, nodes, pods, "fragmentation").summary
    assert s["whole_free_gpus"] == 1
    assert s["free_gpus"] == pytest.approx(1.4)
    assert s["pending_fit_now"] == 1
    assert s["pending_blocked_by"] == {}
    # the reservation pod is the scheduler's placeholder: not a task of the mix
    assert s["task_mix"]["tasks_seen"] == 3


def test_two_kai_groups_take_two_gpus(tmp_path: Path) -> None:
    nodes = [node("n1", gpus=2)]
    pods = [
        reservation("r1", "n1", "g1", None, "kai-resource-reservation"),
        reservation("r2", "n1", "g2", None, "kai-resource-reservation"),
        fraction("a", "n1", 0.3, "g1"),
        fraction("b", "n1", 0.3, "g2"),
        pod("job", None, gpus=1),
    ]
    s = analyze(tmp_path, nodes, pods, "fragmentation").summary
    assert s["whole_free_gpus"] == 0
    assert s["pending_blocked_by"] == {"capacity": 1}


def test_kai_reservation_index_places_the_group(tmp_path: Path) -> None:
    """The reservation pod names GPU 1: the group's GPU is 1, a whole-GPU pod keeps 0."""
    nodes = [node("n1", gpus=2)]
    pods = [
        reservation("r1", "n1", "g1", "1", "runai-reservation"),
        fraction("a", "n1", 0.5, "g1"),
        pod("whole", "n1", gpus=1),
    ]
    plan = analyze(tmp_path, nodes, pods, "consolidation").summary
    assert plan["movable_pods"] == 1
    s = analyze(tmp_path, nodes, pods, "fragmentation").summary
    assert s["free_gpus"] == pytest.approx(0.5)
    assert s["whole_free_gpus"] == 0


# --- memory in bytes, not rounded MiB --------------------------------------------------------


def test_a_pod_88_kb_too_large_does_not_fit(tmp_path: Path) -> None:
    """Node allocatable memory 1048576Ki (1 GiB); a pending 1-GPU pod asks 88 kB more: the
    scheduler says no, and so does gpuscope; asking exactly the allocatable fits."""
    nodes = [node("n1", gpus=1, memory="1048576Ki")]
    too_big = pod("big", None, gpus=1, memory=str(2**30 + 88_000))
    s = analyze(tmp_path, nodes, [too_big], "fragmentation").summary
    assert s["pending_fit_now"] == 0
    assert s["pending_blocked_by"] == {"memory": 1}
    exact = pod("exact", None, gpus=1, memory="1Gi")
    s = analyze(tmp_path, nodes, [exact], "fragmentation").summary
    assert s["pending_fit_now"] == 1


def test_allocatable_below_a_mib_boundary_is_not_rounded_up(tmp_path: Path) -> None:
    """Allocatable 1 GiB less 400 kB (rounds to 1024 MiB to the nearest); a 1 GiB pod does
    not fit."""
    nodes = [node("n1", gpus=1, memory=str(2**30 - 400_000))]
    s = analyze(tmp_path, nodes, [pod("p", None, gpus=1, memory="1Gi")], "fragmentation").summary
    assert s["pending_blocked_by"] == {"memory": 1}


# --- re-queue only where no equally small plan re-places ------------------------------------


def test_equal_evictions_prefer_the_plan_that_re_places_its_victims(tmp_path: Path) -> None:
    """Two jobs, two evictions either way. Evicting the small H100 batch pod for the
    H100 job strands both victims; evicting the 4-GPU batch pod on the big H100 node
    instead frees room where the A100 job's victim can go: one pod re-queued, not two
    (found by the random instances of test_consolidation_checked)."""
    tol = [{"key": "dedicated", "operator": "Equal", "value": "x", "effect": "NoSchedule"}]
    taint = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    nodes = [
        node("n0", gpus=2, model="H100", cpu="16", memory="96Gi"),
        node("n1", gpus=8, model="H100", cpu="16", memory="96Gi", taints=taint),
        node("n4", gpus=4, model="A100", cpu="16", memory="96Gi", taints=taint),
    ]
    pods = [
        pod("r0", "n0", gpus=1, memory="4Gi", kind="interactive", owner="Notebook"),
        pod("r1", "n0", gpus=1, memory="4Gi"),
        pod("r2", "n1", gpus=4, memory="4Gi", tolerations=tol),
        pod(
            "r4", "n1", gpus=4, memory="4Gi", kind="interactive", owner="Notebook", tolerations=tol
        ),
        pod(
            "r10", "n4", gpus=1, memory="4Gi", kind="interactive", owner="Notebook", tolerations=tol
        ),
        pod("r14", "n4", gpus=2, memory="4Gi", tolerations=tol),
        pod(
            "job15",
            None,
            gpus=2,
            memory="8Gi",
            tolerations=tol,
            node_selector={"nvidia.com/gpu.product": "A100"},
        ),
        pod(
            "job16",
            None,
            gpus=1,
            memory="8Gi",
            tolerations=tol,
            node_selector={"nvidia.com/gpu.product": "H100"},
        ),
    ]
    plan = analyze(tmp_path, nodes, pods, "consolidation").summary
    assert plan["goals_met"] == 2
    assert plan["evictions_count"] == 2
    fates = {m["pod"]: m["to_node"] for m in plan["moves"]}
    assert fates == {"r14": "n1", "r2": ""}


def test_victims_re_placed_so_that_fewest_go_back_to_the_queue(tmp_path: Path) -> None:
    """A 4-GPU job needs all of n0 (three batch pods: 1, 1 and 2 GPUs); the only room left
    is n2's 2 GPUs. Re-placing the 2-GPU pod first strands both 1-GPU pods; the two 1-GPU
    pods fit there and only one pod goes back to the queue (found by the random
    instances of test_consolidation_checked)."""
    nodes = [
        node("n0", gpus=4, cpu="16", memory="96Gi"),
        node("n1", gpus=2, cpu="16", memory="96Gi"),
        node("n2", gpus=2, cpu="16", memory="96Gi"),
    ]
    pods = [
        pod("r0", "n0", gpus=1, memory="4Gi"),
        pod("r1", "n0", gpus=1, memory="4Gi"),
        pod("r2", "n0", gpus=2, memory="4Gi"),
        pod("r3", "n1", cpu="16", memory="4Gi", kind="interactive", owner="Notebook"),
        pod("job", None, gpus=4, memory="8Gi"),
    ]
    plan = analyze(tmp_path, nodes, pods, "consolidation").summary
    assert plan["evictions_count"] == 3
    fates = {m["pod"]: m["to_node"] for m in plan["moves"]}
    assert fates == {"r0": "n2", "r1": "n2", "r2": ""}


def test_multi_gpu_fraction_follows_its_groups(tmp_path: Path) -> None:
    """KAI labels a fraction on two GPUs with one ``runai-gpu-group/<group>`` label per
    GPU: 0.5 on each of g1 and g2, and another 0.5 in g1, fill g1 and half g2; two GPUs of
    four stay whole."""
    nodes = [node("n1", gpus=4)]
    pods = [
        reservation("r1", "n1", "g1", None, "kai-resource-reservation"),
        reservation("r2", "n1", "g2", None, "kai-resource-reservation"),
        pod(
            "two",
            "n1",
            annotations={"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"},
            labels={"runai-gpu-group/g1": "g1", "runai-gpu-group/g2": "g2"},
            kind="inference",
        ),
        fraction("one", "n1", 0.5, "g1"),
    ]
    s = analyze(tmp_path, nodes, pods, "fragmentation").summary
    assert s["whole_free_gpus"] == 2
    assert s["free_gpus"] == pytest.approx(2.5)
    assert s["partially_used_gpus"] == 1
