"""FGD and node fragmentation on cases whose answer is worked out by hand."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscope.analytics.placement.allocation import (
    ClusterState,
    NodeState,
    Task,
    state_from_records,
)
from gpuscope.analytics.placement.fragmentation import (
    TaskMix,
    analyze_fragmentation,
    fgd_node,
    learn_task_mix,
    node_placements,
    pack_free,
    task_fragment,
)
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.core.settings import AnalyticsSettings

AT = datetime(2025, 1, 1, tzinfo=UTC)
HALF = Task(gpu_count=1, gpu_share=0.5)
ONE = Task(gpu_count=1, gpu_share=1.0)
CPU_ONLY = Task(cpu_milli=1000)


def node(*gpus: float, model: str = "", cpu: int = 64_000, pool: str = "p") -> NodeState:
    return NodeState(
        name="n", pool=pool, gpu_model=model, gpus=gpus, cpu_milli_free=cpu, cpu_milli_total=cpu
    )


def mix(*pairs: tuple[Task, float]) -> TaskMix:
    return TaskMix(tasks=tuple(t for t, _ in pairs), weights=tuple(w for _, w in pairs))


def test_fgd_of_the_worked_example() -> None:
    # free GPUs [1.0, 0.5, 0.2] (1.7 free); mix 0.5-GPU p=0.5, 1-GPU p=0.3, CPU-only p=0.2
    # - 0.5-GPU task fits (GPU 0 or 1); too small for it: the 0.2       -> 0.2
    # - 1-GPU task fits (GPU 0); too small for it: 0.5 + 0.2            -> 0.7
    # - CPU-only task uses no GPU: all free GPU is a fragment to it     -> 1.7
    # expected: 0.5*0.2 + 0.3*0.7 + 0.2*1.7 = 0.10 + 0.21 + 0.34 = 0.65
    n = node(1.0, 0.5, 0.2)
    m = mix((HALF, 0.5), (ONE, 0.3), (CPU_ONLY, 0.2))
    assert task_fragment(n, HALF) == pytest.approx(0.2)
    assert task_fragment(n, ONE) == pytest.approx(0.7)
    assert task_fragment(n, CPU_ONLY) == pytest.approx(1.7)
    assert fgd_node(n, m) == pytest.approx(0.65)


def test_slivers_too_small_for_every_task_are_all_fragment() -> None:
    # the paper's motivating case: two 0.3 slivers and only 0.5-GPU tasks -> 0.6 fragmented
    assert fgd_node(node(0.3, 0.3), mix((HALF, 1.0))) == pytest.approx(0.6)
    # a fully free node has no fragment for a GPU task, only for CPU-only ones
    assert fgd_node(node(1.0, 1.0), mix((ONE, 0.75), (CPU_ONLY, 0.25))) == pytest.approx(0.5)


def test_a_task_that_does_not_fit_counts_all_free_gpu() -> None:
    n = node(1.0, 0.5)
    two = Task(gpu_count=2, gpu_share=1.0)
    assert task_fragment(n, two) == pytest.approx(1.5)  # too few whole GPUs free
    hungry = Task(cpu_milli=8000, gpu_count=1, gpu_share=0.5)
    assert task_fragment(node(1.0, 0.5, cpu=4000), hungry) == pytest.approx(1.5)  # CPU short
    assert task_fragment(node(1.0, 0.5, cpu=8000), hungry) == pytest.approx(0.0)
    # a multi-GPU task that fits leaves only the sliver: [1, 1, 0.4] and 2 GPUs -> 0.4
    assert task_fragment(node(1.0, 1.0, 0.4), two) == pytest.approx(0.4)


def test_gpu_model_constraints() -> None:
    v100 = Task(gpu_count=1, gpu_share=0.5, gpu_models=frozenset({"V100M16", "V100M32"}))
    assert task_fragment(node(1.0, 0.2, model="T4"), v100) == pytest.approx(1.2)
    assert task_fragment(node(1.0, 0.2, model="V100M32"), v100) == pytest.approx(0.2)


def test_task_mix_keeps_the_most_frequent_groups_until_coverage() -> None:
    a, b, c, d = CPU_ONLY, ONE, HALF, Task(gpu_count=8, gpu_share=1.0)
    tasks = [a] * 60 + [b] * 30 + [c] * 6 + [d] * 4
    learnt = learn_task_mix(tasks, 0.95)
    # 60 % < 95 %, 90 % < 95 %, 96 % >= 95 %: three groups, renormalised over 96 tasks
    assert learnt.tasks == (a, b, c)
    assert learnt.weights == pytest.approx((60 / 96, 30 / 96, 6 / 96))
    assert learnt.coverage == pytest.approx(0.96)
    assert (learnt.groups_seen, learnt.tasks_seen) == (4, 100)
    only = learn_task_mix(tasks, 0.6)
    assert only.tasks == (a,) and only.weights == (1.0,)
    # the name is not part of the group
    assert len(learn_task_mix([Task(name="x"), Task(name="y")]).tasks) == 1
    assert learn_task_mix([]).tasks == ()


def test_node_fragmentation_three_three_two() -> None:
    # free [3, 3, 2] on 8-GPU nodes: no 4-GPU job fits now; packed, 8 free GPUs make 2 jobs
    assert node_placements([3, 3, 2], 4, [8, 8, 8]) == (0, 2)
    assert node_placements([3, 3, 2], 2, [8, 8, 8]) == (3, 4)
    assert pack_free([3, 3, 2], [8, 8, 8], 4) == [8, 0, 0]  # one node holds all 8


def _whole(free: int, total: int = 8, name: str = "n") -> NodeState:
    gpus = (1.0,) * free + (0.0,) * (total - free)
    return NodeState(name=name, pool="p", gpus=gpus, cpu_milli_free=1, cpu_milli_total=1)


def test_pending_job_blocked_by_scattered_gpus() -> None:
    nodes = (_whole(3, name="a"), _whole(3, name="b"), _whole(2, name="c"))
    state = ClusterState(nodes=nodes, pending=(Task(gpu_count=4, gpu_share=1.0),))
    result = analyze_fragmentation(state, at=AT, settings=AnalyticsSettings(job_sizes=[2]))
    [found] = [f for f in result.findings if f.kind == "node_fragmentation"]
    assert found.severity == "warning"
    assert found.subject == {"pool": "p"}
    assert found.recommendation == {
        "action": "consolidate",
        "target": {"pool": "p", "job_gpus": 4},
    }
    assert found.evidence["free_gpus_per_node"] == {"a": 3, "b": 3, "c": 2}
    assert found.evidence["jobs_fit_now"]["4"] == 0
    assert found.evidence["jobs_fit_packed"]["4"] == 2
    s = result.summary
    assert (s["total_gpus"], s["free_gpus"], s["largest_placeable_job_gpus"]) == (24, 8, 3)
    assert s["jobs_fit_now"] == {"2": 3, "4": 0}
    assert s["jobs_fit_packed"] == {"2": 4, "4": 2}
    # only a whole-GPU 4-GPU task in the mix, and it fits nowhere: all free GPU is fragment
    assert s["fgd_fragmented_gpus"] == pytest.approx(8.0)
    assert s["fgd_fragmentation_ratio"] == pytest.approx(1.0)


def test_no_finding_when_the_pool_lacks_the_gpus() -> None:
    state = ClusterState(nodes=(_whole(1), _whole(1, name="m")), pending=(ONE,))
    result = analyze_fragmentation(state, at=AT, settings=AnalyticsSettings(job_sizes=[4]))
    assert [f.kind for f in result.findings] == []  # 2 free < 4: not fragmentation


def test_nodes_too_small_for_a_size_are_capacity_not_fragmentation() -> None:
    """Four 1-GPU nodes, all free: a 2-GPU job fits nowhere, but packing could not help
    (each node holds one GPU), so there is no node_fragmentation finding."""
    small = tuple(_whole(1, total=1, name=f"s{i}") for i in range(4))
    state = ClusterState(nodes=small, pending=(Task(gpu_count=2, gpu_share=1.0),))
    result = analyze_fragmentation(state, at=AT, settings=AnalyticsSettings(job_sizes=[2]))
    assert [f.kind for f in result.findings if f.kind == "node_fragmentation"] == []
    assert result.summary["jobs_fit_packed"]["2"] == 0


def test_gpu_fragmentation_finding_and_summary_counts() -> None:
    slivers = tuple(NodeState(name=f"n{i}", pool="p", gpus=(0.3, 0.3, 0.0, 1.0)) for i in range(4))
    state = ClusterState(nodes=slivers, running=(HALF,) * 9 + (ONE,))
    result = analyze_fragmentation(state, at=AT, settings=AnalyticsSettings())
    s = result.summary
    assert s["partially_used_gpus"] == 8
    assert s["stranded_gpu_capacity"] == pytest.approx(2.4)
    # per node: 0.5-task (p=.9) fits GPU 3, fragment 0.6; 1-task (p=.1) fragment 0.6
    assert s["fgd_fragmented_gpus"] == pytest.approx(4 * 0.6)
    assert s["fgd_fragmentation_ratio"] == pytest.approx(2.4 / 6.4)
    [found] = [f for f in result.findings if f.kind == "gpu_fragmentation"]
    assert found.severity == "warning"  # 0.375: between 0.25 and 0.5
    assert len(found.evidence["nodes"]) == 4


def test_placed_pods_take_whole_gpus_then_fractions_spread() -> None:
    def pod(name: str, *, gpus: int = 0, fraction: float | None = None) -> PodInfo:
        return PodInfo(
            "ns", name, name, "n", "Running", None, gpu_request=gpus, gpu_fraction=fraction
        )

    pods = [pod("a", fraction=0.25), pod("b", fraction=0.5), pod("c", gpus=1)]
    pods += [pod("d", fraction=0.5), PodInfo("ns", "w", "w", None, "Pending", None, gpu_request=2)]
    state = state_from_records([NodeInfo("n", allocatable_gpus=4, pool="p")], pods)
    # c takes GPU 0; b, d, a each onto the emptiest GPU left: no GPU is claimed whole that
    # the scheduler may have broken (gpuscope.analytics.placement.allocation_gpus)
    assert state.nodes[0].gpus == (0.0, 0.5, 0.5, 0.75)
    assert state.pending == (Task(gpu_count=2, gpu_share=1.0, name="ns/w"),)
    assert len(state.running) == 4
    # where the agents know the GPUs, they are used instead of the reconstruction
    known = state_from_records(
        [NodeInfo("n", allocatable_gpus=4, pool="p")], pods, {"ns/b": [2], "ns/d": [3]}
    )
    # b, d on GPUs 2 and 3; c takes GPU 0; a onto the emptiest GPU left, GPU 1
    assert known.nodes[0].gpus == (0.0, 0.75, 0.5, 0.5)


free_lists = st.lists(
    st.one_of(st.just(1.0), st.just(0.0), st.floats(0, 1)), min_size=0, max_size=8
)
tasks = st.builds(
    Task,
    cpu_milli=st.integers(0, 8000),
    gpu_count=st.integers(0, 8),
    gpu_share=st.one_of(st.just(1.0), st.floats(0.01, 1)),
    gpu_models=st.sets(st.sampled_from(["A", "B"]), max_size=2).map(frozenset),
)


@settings(max_examples=200, deadline=None)
@given(
    gpus=free_lists,
    model=st.sampled_from(["", "A", "B"]),
    cpu=st.integers(0, 8000),
    pairs=st.lists(st.tuples(tasks, st.floats(0.01, 1)), min_size=1, max_size=6),
)
def test_fgd_never_exceeds_free_capacity(
    gpus: list[float], model: str, cpu: int, pairs: list[tuple[Task, float]]
) -> None:
    total = sum(w for _, w in pairs)
    m = mix(*((t, w / total) for t, w in pairs))
    n = node(*gpus, model=model, cpu=cpu)
    value = fgd_node(n, m)
    assert 0.0 <= value <= n.free_gpus + 1e-9


@settings(max_examples=200, deadline=None)
@given(
    nodes=st.lists(
        st.integers(1, 16).flatmap(lambda c: st.tuples(st.just(c), st.integers(0, c))),
        min_size=1,
        max_size=12,
    ),
    k=st.integers(1, 16),
)
def test_packing_never_loses_a_gpu(nodes: list[tuple[int, int]], k: int) -> None:
    caps = [c for c, _ in nodes]
    free = [f for _, f in nodes]
    packed = pack_free(free, caps, k)
    assert sum(packed) == sum(free)
    assert all(0 <= p <= c for p, c in zip(packed, caps, strict=True))
    now, after = node_placements(free, k, caps)
    assert now <= after <= sum(free) // k
    assert after == min(sum(free) // k, sum(c // k for c in caps))
