"""An independent brute-force reference for FGD, free/placeable capacity and fits-now,
checked against the product on random cluster states built from the openb node types
(CPU included), and on the public trace's gpuspec workloads.

The reference shares no code with the product: it keeps GPU shares in integer milli-GPU,
reads the trace with :mod:`csv` itself, and follows the definitions in docs/analytics.md
and frag.go (hkust-adsl/kubernetes-scheduler-simulator) literally, one node and one task
at a time.
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscope.analytics.placement.allocation import state_from_records
from gpuscope.analytics.placement.fragmentation import analyze_fragmentation, summarize
from gpuscope.analytics.runner import run_on_snapshot
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.core.settings import AnalyticsSettings, Settings
from tests.paths import FIXTURES

AT = datetime(2025, 1, 1, tzinfo=UTC)
CSV = FIXTURES / "alibaba-gpu-v2023" / "csv"
COVERAGE = 0.95


# --- the reference ---------------------------------------------------------------------


@dataclass
class RefNode:
    name: str
    model: str
    cpu: int
    gpus: int
    open: bool = True
    free_milli: list[int] = field(default_factory=list)
    free_cpu: int = 0


@dataclass(frozen=True)
class RefTask:
    cpu: int
    count: int  # GPUs
    milli: int  # per GPU, 0 for CPU-only
    spec: str  # "A|B" or "" for any model


def ref_mix(tasks: list[RefTask]) -> list[tuple[RefTask, float]]:
    """frag.go's GetTypicalPods with step 1: count types, sort by count then the type's
    fields, all descending, keep until the coverage, renormalise."""
    counts = Counter(tasks)
    order = sorted(counts, key=lambda t: t.spec, reverse=True)
    order.sort(key=lambda t: (counts[t], t.cpu, t.milli, t.count), reverse=True)
    total = sum(counts.values())
    kept: list[RefTask] = []
    cum = 0
    for t in order:
        if cum >= COVERAGE * total:
            break
        kept.append(t)
        cum += counts[t]
    return [(t, counts[t] / cum) for t in kept]


def ref_fits(node: RefNode, task: RefTask) -> bool:
    if task.count == 0 or not node.open:
        return False
    if task.spec and node.model not in task.spec.split("|"):
        return False
    if task.cpu > node.free_cpu:
        return False
    return sum(1 for f in node.free_milli if f >= task.milli) >= task.count


def ref_fgd(node: RefNode, mix: list[tuple[RefTask, float]]) -> float:
    free = sum(node.free_milli)
    total = 0.0
    for task, weight in mix:
        if ref_fits(node, task):
            total += weight * sum(f for f in node.free_milli if f < task.milli)
        else:
            total += weight * free
    return total / 1000


def ref_summary(
    nodes: list[RefNode], running: list[RefTask], pending: list[RefTask]
) -> dict[str, Any]:
    mix = ref_mix(running + pending)
    usable = [n for n in nodes if n.open and n.gpus]
    closed = [n for n in nodes if not n.open and n.gpus]
    free = sum(sum(n.free_milli) for n in usable) / 1000
    frag = sum(ref_fgd(n, mix) for n in usable)
    whole = [sum(1 for f in n.free_milli if f == 1000) for n in usable]
    return {
        "free_gpus": free,
        "unschedulable_free_gpus": sum(sum(n.free_milli) for n in closed) / 1000,
        "whole_free_gpus": sum(whole),
        "largest_placeable_job_gpus": max(whole, default=0),
        "fgd_fragmented_gpus": frag,
        "fgd_fragmentation_ratio": frag / free if free else 0.0,
        "pending_fit_now": sum(
            1 for t in pending if t.count and any(ref_fits(n, t) for n in usable)
        ),
        "jobs_fit_now": {k: sum(w // k for w in whole) for k in (1, 2, 4, 8)},
    }


# --- random states from the openb node types -------------------------------------------

#: (CPU milli, GPUs, model) of the openb GPU nodes (openb_node_list_gpu_node.csv).
OPENB_TYPES = [
    (96000, 8, "G2"),
    (104000, 2, "T4"),
    (16000, 2, "P100"),
    (128000, 8, "G3"),
    (32000, 4, "V100M16"),
    (64000, 2, "P100"),
    (96000, 8, "V100M32"),
    (8000, 1, "V100M16"),
    (96000, 4, "T4"),
    (48000, 4, "V100M32"),
    (128000, 1, "A10"),
]
SPECS = ["", "", "", "T4", "V100M16|V100M32", "V100M16|V100M32|V100M32", "G2|G3"]
MILLI = [1000, 1000, 500, 250, 300, 700, 100]


@st.composite
def states(
    draw: st.DrawFn,
) -> tuple[
    list[RefNode], list[RefTask], list[RefTask], list[NodeInfo], list[PodInfo], dict[str, list[int]]
]:
    ref_nodes: list[RefNode] = []
    running: list[RefTask] = []
    infos: list[NodeInfo] = []
    pods: list[PodInfo] = []
    indices: dict[str, list[int]] = {}
    cpus = st.sampled_from([0, 1000, 4000, 8000, 16000, 32000, 64000])
    for i in range(draw(st.integers(1, 6))):
        cpu, gpus, model = draw(st.sampled_from(OPENB_TYPES))
        cordoned = draw(st.sampled_from([False] * 6 + [True]))
        ready = draw(st.sampled_from([True] * 8 + [False]))
        node = RefNode(f"n{i}", model, cpu, gpus, ready and not cordoned, [1000] * gpus, cpu)
        infos.append(
            NodeInfo(
                node.name,
                gpu_model=model,
                allocatable_gpus=gpus,
                cpu_milli=cpu,
                ready=ready,
                unschedulable=cordoned,
            )
        )
        for j in range(draw(st.integers(0, 2 * gpus + 1))):
            milli = draw(st.sampled_from([*MILLI, 0]))
            count = draw(st.sampled_from([1, 1, 1, 2, 4])) if milli == 1000 else int(milli > 0)
            want = draw(cpus)
            ok = [g for g in range(gpus) if node.free_milli[g] >= milli] if count else []
            if len(ok) < count or want > node.free_cpu:
                continue
            taken = sorted(draw(st.permutations(ok))[:count]) if count else []
            for g in taken:
                node.free_milli[g] -= milli
            node.free_cpu -= want
            name = f"p{i}-{j}"
            running.append(RefTask(want, count, milli, ""))
            pods.append(_pod(name, node.name, want, count, milli))
            if taken:
                indices[f"ns/{name}"] = taken
        ref_nodes.append(node)
    pending: list[RefTask] = []
    for j in range(draw(st.integers(0, 6))):
        milli = draw(st.sampled_from([*MILLI, 0]))
        count = draw(st.sampled_from([1, 1, 2, 4, 8])) if milli == 1000 else int(milli > 0)
        spec = draw(st.sampled_from(SPECS)) if count else ""
        want = draw(cpus)
        pending.append(RefTask(want, count, milli, spec))
        pods.append(_pod(f"w{j}", None, want, count, milli, spec))
    return ref_nodes, running, pending, infos, pods, indices


def _pod(name: str, node: str | None, cpu: int, count: int, milli: int, spec: str = "") -> PodInfo:
    whole = milli == 1000
    return PodInfo(
        "ns",
        name,
        name,
        node,
        "Running" if node else "Pending",
        None,
        owner_kind="Job",
        gpu_request=count if whole else 0,
        gpu_fraction=milli / 1000 if count and not whole else None,
        cpu_milli=cpu,
        gpu_spec=spec,
    )


def _product_summary(
    infos: list[NodeInfo], pods: list[PodInfo], indices: dict[str, list[int]]
) -> dict[str, Any]:
    state = state_from_records(infos, pods, indices)
    settings_ = AnalyticsSettings(job_sizes=[1, 2, 4, 8], fgd_task_coverage=COVERAGE)
    return analyze_fragmentation(state, at=AT, settings=settings_).summary


@settings(
    max_examples=250, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(states())
def test_fgd_and_placeable_equal_the_reference(case: Any) -> None:
    ref_nodes, running, pending, infos, pods, indices = case
    want = ref_summary(ref_nodes, running, pending)
    got = _product_summary(infos, pods, indices)
    for key in (
        "free_gpus",
        "unschedulable_free_gpus",
        "fgd_fragmented_gpus",
        "fgd_fragmentation_ratio",
    ):
        assert abs(got[key] - want[key]) < 1e-6, (key, got[key], want[key])
    for key in ("whole_free_gpus", "largest_placeable_job_gpus", "pending_fit_now"):
        assert got[key] == want[key], key
    for k, n in want["jobs_fit_now"].items():
        assert got["jobs_fit_now"][str(k)] == n


def test_summarize_is_the_detectors_summary() -> None:
    """The per-snapshot entry the weekly report calls gives the detector's figures."""
    infos = [NodeInfo("a", allocatable_gpus=2, cpu_milli=104000)]
    pods = [_pod("big", "a", 100000, 1, 1000)] + [
        _pod(f"w{i}", None, 8000, 1, 1000) for i in range(3)
    ]
    s = summarize(infos, pods, AT)
    assert s["fgd_fragmentation_ratio"] == pytest.approx(1.0)
    state = state_from_records(infos, pods)
    assert s == analyze_fragmentation(state, at=AT, settings=AnalyticsSettings()).summary


# --- the public trace's gpuspec workloads ---------------------------------------------


def _trace_reference(pod_csv: Path) -> float:
    nodes = []
    with (CSV / "openb_node_list_gpu_node.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            gpus = int(row["gpu"])
            nodes.append(
                RefNode(
                    row["sn"],
                    row["model"],
                    int(row["cpu_milli"]),
                    gpus,
                    True,
                    [1000] * gpus,
                    int(row["cpu_milli"]),
                )
            )
    tasks = []
    with pod_csv.open(newline="") as f:
        for row in csv.DictReader(f):
            count = int(row["num_gpu"])
            milli = int(row["gpu_milli"]) if count else 0
            milli = 1000 if count and milli == 0 else milli
            spec = (row.get("gpu_spec") or "").strip() if count else ""
            tasks.append(
                RefTask(int(row["cpu_milli"]), count, milli, "" if spec == "nan" else spec)
            )
    mix = ref_mix(tasks)
    return sum(ref_fgd(n, mix) for n in nodes)


@pytest.mark.parametrize("name", ["gpuspec10", "gpuspec25", "gpuspec33"])
def test_gpuspec_traces_match_the_reference(name: str) -> None:
    pod_csv = CSV / f"openb_pod_list_{name}.csv"
    got = run_on_snapshot(CSV / "openb_node_list_gpu_node.csv", pod_csv, AT, Settings())
    assert abs(got.summary["fgd_fragmented_gpus"] - _trace_reference(pod_csv)) < 1e-6


# --- GPU reconstruction from kubectl files ----------------------------------------------


@settings(
    max_examples=250, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(states())
def test_reconstruction_never_claims_more_than_the_truth(case: Any) -> None:
    """Without the agents' GPU indices (a kubectl file) the reconstruction keeps every
    node's free capacity, over-commits no GPU, and never finds more whole free GPUs on a
    node than the true placement left (the old best fit found 303 too many over 250
    states)."""
    ref_nodes, _, _, infos, pods, _ = case
    state = state_from_records(infos, pods)
    by_name = {n.name: n for n in ref_nodes}
    for node in state.nodes:
        truth = by_name[node.name]
        assert all(-1e-9 <= f <= 1.0 + 1e-9 for f in node.gpus)
        assert abs(node.free_gpus - sum(truth.free_milli) / 1000) < 1e-6
        assert node.whole_free_gpus <= sum(1 for f in truth.free_milli if f == 1000)
