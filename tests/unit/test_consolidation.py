"""The consolidation planner: hand cases, plan validity, and its gap to baselines and the
exact ILP on random small clusters."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscope.analytics.consolidation.plan import (
    Goal,
    Placed,
    Plan,
    analyze_consolidation,
    goals_from_pending,
    placement_from_state,
    plan_consolidation,
    plan_first_fit_decreasing,
    plan_greedy,
    plan_high_node_utilization,
)
from gpuscope.analytics.placement.allocation import ClusterState, NodeState
from gpuscope.collector.cluster.inventory_records import PodInfo
from gpuscope.core.records import WorkloadKind
from gpuscope.core.settings import AnalyticsSettings

AT = datetime(2025, 1, 1, tzinfo=UTC)


def node(name: str, gpus: int, placed: Sequence[Placed], **kw: object) -> NodeState:
    free = [1.0] * gpus
    for p in placed:
        if p.node == name:
            for g in p.gpus:
                free[g] -= p.share
    return NodeState(name=name, gpus=tuple(round(f, 9) for f in free), **kw)  # type: ignore[arg-type]


def pod(
    name: str,
    where: str,
    gpus: tuple[int, ...],
    share: float = 1.0,
    *,
    movable: bool = True,
    gph: float = 1.0,
) -> Placed:
    return Placed("ns", name, where, gpus, share, movable, "" if movable else "interactive", gph)


def check_valid(nodes: Sequence[NodeState], placed: Sequence[Placed], plan: Plan) -> None:
    """No GPU over-committed after the moves; every pod still somewhere (or pending)."""
    used = {n.name: [1.0 - f for f in n.gpus] for n in nodes}
    by_key = {p.key: p for p in placed}
    assert len(set(plan.evictions)) == len(plan.evictions)
    assert {f"{m.namespace}/{m.pod}" for m in plan.moves} == set(plan.evictions)
    for m in plan.moves:
        p = by_key[f"{m.namespace}/{m.pod}"]
        assert p.movable, p
        assert m.from_node == p.node and m.from_gpus == p.gpus
        for g in p.gpus:
            used[p.node][g] -= p.share
        if m.to_node:
            assert len(m.to_gpus) == len(p.gpus)
            for g in m.to_gpus:
                used[m.to_node][g] += p.share
    for name, gpus in used.items():
        assert all(u <= 1.0 + 1e-6 for u in gpus), (name, gpus)
    assert len(placed) == len(by_key)


def test_pending_job_needs_one_move() -> None:
    placed = [
        pod("a", "n1", (0,)),
        pod("b", "n2", (0,)),
        pod("c", "n2", (1,)),
        pod("d", "n3", (0,)),
        pod("e", "n3", (1,)),
    ]
    nodes = [node("n1", 4, placed), node("n2", 5, placed), node("n3", 4, placed)]
    assert [n.whole_free_gpus for n in nodes] == [3, 3, 2]
    plan = plan_consolidation(nodes, placed, [Goal("pending_job", gpus=4, label="job")])
    assert plan.goals_met == 1 and not plan.unplaceable
    assert len(plan.evictions) == 1
    assert plan.moves[0].to_node  # it fits elsewhere: a move, not a loss
    check_valid(nodes, placed, plan)


def test_goal_already_met_costs_nothing() -> None:
    placed = [pod("a", "n1", (0,))]
    nodes = [node("n1", 8, placed)]
    plan = plan_consolidation(nodes, placed, [Goal("pending_job", gpus=4)])
    assert plan.goals_met == 1 and not plan.moves


def test_interactive_node_never_chosen() -> None:
    placed = [
        pod("i1", "n1", (0,), movable=False),
        pod("i2", "n1", (1,), movable=False),
        pod("b1", "n2", (0,), gph=50),
        pod("b2", "n2", (1,), gph=50),
    ]
    nodes = [node("n1", 2, placed), node("n2", 2, placed)]
    plan = plan_consolidation(nodes, placed, [Goal("pending_job", gpus=2, label="j")])
    assert plan.goals_met == 1
    assert all(m.from_node == "n2" for m in plan.moves)
    assert plan.targets == [("j", "n2")]


def test_fixed_pods_never_moved_and_reason_given() -> None:
    placed = [pod("i1", "n1", (0,), movable=False), pod("b1", "n1", (1,))]
    nodes = [node("n1", 2, placed)]
    plan = plan_consolidation(nodes, placed, [Goal("pending_job", gpus=2, label="j")])
    assert plan.goals_met == 0 and not plan.moves
    assert plan.unplaceable[0][0] == "j" and "moving every pod" in plan.unplaceable[0][1]


def test_tie_break_by_gpu_hours_lost() -> None:
    placed = [pod("old", "n1", (0,), gph=100.0), pod("new", "n2", (0,), gph=0.5)]
    nodes = [node("n1", 2, placed), node("n2", 2, placed)]
    for planner in (plan_consolidation, plan_greedy):
        plan = planner(nodes, placed, [Goal("pending_job", gpus=2)])
        assert plan.evictions == ["ns/new"]
        assert plan.gpu_hours_lost == pytest.approx(0.5)


def test_multi_gpu_pod_preferred_over_many_small() -> None:
    placed = [pod("big", "n1", (0, 1, 2, 3)), pod("s1", "n1", (4,)), pod("s2", "n1", (5,))]
    nodes = [node("n1", 8, placed)]
    plan = plan_greedy(nodes, placed, [Goal("pending_job", gpus=4)])
    assert plan.evictions == ["ns/big"]


def test_fractional_bin_packing_frees_a_gpu() -> None:
    placed = [pod("f1", "n1", (0,), 0.5), pod("f2", "n1", (1,), 0.25), pod("f3", "n1", (2,), 0.5)]
    nodes = [node("n1", 3, placed)]
    assert nodes[0].whole_free_gpus == 0
    plan = plan_consolidation(nodes, placed, [Goal("free_gpus", gpus=1, label="g")])
    assert plan.goals_met == 1 and len(plan.evictions) == 1
    assert plan.moves[0].to_node == "n1"
    check_valid(nodes, placed, plan)


def test_free_nodes_and_max_evictions() -> None:
    placed = [pod("a", "n1", (0,)), pod("b", "n2", (0,)), pod("c", "n2", (1,))]
    nodes = [node("n1", 4, placed), node("n2", 4, placed)]
    plan = plan_consolidation(nodes, placed, [Goal("free_nodes", count=1)])
    assert plan.evictions == ["ns/a"] and plan.moves[0].to_node == "n2"
    capped = plan_consolidation(nodes, placed, [Goal("free_nodes", count=2)], max_evictions=1)
    assert capped.goals_met == 0 and "max_evictions" in capped.unplaceable[0][1]


def test_model_constraint() -> None:
    placed = [pod("a", "n1", (0,))]
    nodes = [node("n1", 2, placed, gpu_model="A100"), node("n2", 2, [], gpu_model="H100")]
    goal = Goal("pending_job", gpus=2, gpu_models=frozenset({"A100"}))
    plan = plan_consolidation(nodes, placed, [goal])
    assert plan.targets[0][1] == "n1" and plan.evictions == ["ns/a"]


def _pi(name: str, ns: str = "team", **kw: object) -> PodInfo:
    base: dict[str, object] = dict(
        namespace=ns,
        name=name,
        uid=name,
        node="n1",
        phase="Running",
        start_time=AT.timestamp() - 7200,
        gpu_request=1,
        kind=WorkloadKind.BATCH,
        preemptible=True,
    )
    base.update(kw)
    return PodInfo(**base)  # type: ignore[arg-type]


def test_placement_policy_and_analysis() -> None:
    pods = [
        _pi("batch"),
        _pi("nb", kind=WorkloadKind.INTERACTIVE),
        _pi("prot", protected=True),
        _pi("sys", ns="kube-system"),
        _pi("pdb"),
        _pi("np", preemptible=False),
        _pi(
            "frac",
            gpu_request=0,
            gpu_fraction=0.5,
            annotations={"gpuscope.io/last-checkpoint": str(AT.timestamp() - 3600)},
        ),
        _pi("want", node=None, phase="Pending", gpu_request=2),
    ]
    state = ClusterState(nodes=(NodeState("n1", gpus=(0.0,) * 6 + (0.5, 1.0)),))
    placed = placement_from_state(
        state, pods, at=AT, protected_namespaces=["kube-system"], pdb_blocked={"team/pdb"}
    )
    reasons = {p.pod: p.reason_fixed for p in placed}
    assert reasons == {
        "batch": "",
        "nb": "interactive",
        "prot": "protected",
        "sys": "protected namespace",
        "pdb": "pdb exhausted",
        "np": "not preemptible",
        "frac": "",
    }
    by = {p.pod: p for p in placed}
    assert by["batch"].gpu_hours_lost == pytest.approx(2.0)
    assert by["frac"].gpu_hours_lost == pytest.approx(0.5)
    used = sorted(g for p in placed for g in p.gpus)
    assert used == [0, 1, 2, 3, 4, 5, 6]
    goals = goals_from_pending(pods)
    assert goals == [Goal("pending_job", gpus=2, share=1.0, label="team/want")]
    analysis = analyze_consolidation(
        state, pods, at=AT, settings=AnalyticsSettings(), pdb_blocked={"team/pdb"}
    )
    s = analysis.summary
    assert s["goals"] == 1 and s["goals_met"] == 1 and s["evictions_count"] == 1
    assert s["evictions"] == ["team/frac"] or s["evictions"] == ["team/batch"]
    assert analysis.findings[0].recommendation is not None
    assert analysis.findings[0].recommendation["action"] == "consolidate"
    assert {"namespace", "pod", "from_node", "to_node"} <= set(s["moves"][0])


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeState], list[Placed], list[Goal]]:
    n_nodes = draw(st.integers(1, 4))
    placed: list[Placed] = []
    nodes = []
    for i in range(n_nodes):
        name = f"n{i}"
        size = draw(st.sampled_from([2, 4, 8]))
        free = [1.0] * size
        for j in range(draw(st.integers(0, size + 2))):
            share = draw(st.sampled_from([1.0, 1.0, 0.5, 0.25]))
            count = draw(st.integers(1, 3)) if share == 1.0 else 1
            ok = [g for g in range(size) if free[g] >= share - 1e-9]
            if len(ok) < count:
                continue
            gpus = tuple(sorted(draw(st.permutations(ok))[:count]))
            for g in gpus:
                free[g] -= share
            placed.append(
                pod(
                    f"p{i}-{j}",
                    name,
                    gpus,
                    share,
                    movable=draw(st.booleans()),
                    gph=draw(st.sampled_from([0.5, 1.0, 3.0])),
                )
            )
        nodes.append(NodeState(name=name, gpus=tuple(round(f, 9) for f in free)))
    goals = draw(
        st.lists(
            st.one_of(
                st.builds(
                    Goal,
                    st.just("pending_job"),
                    gpus=st.integers(1, 4),
                    share=st.sampled_from([1.0, 1.0, 0.5]),
                ),
                st.builds(Goal, st.just("free_gpus"), gpus=st.integers(1, 3)),
                st.builds(Goal, st.just("free_nodes"), count=st.just(1)),
            ),
            min_size=1,
            max_size=3,
        )
    )
    goals = [Goal(g.kind, g.gpus, g.share, g.count, f"g{i}") for i, g in enumerate(goals)]
    return nodes, placed, goals


@settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(clusters())
def test_planner_vs_baselines_and_exact(
    case: tuple[list[NodeState], list[Placed], list[Goal]],
) -> None:
    from gpuscope.analytics.consolidation.exact import exact_min_evictions

    nodes, placed, goals = case
    plan = plan_consolidation(nodes, placed, goals)
    check_valid(nodes, placed, plan)
    for baseline in (plan_high_node_utilization, plan_first_fit_decreasing):
        other = baseline(nodes, placed, goals)
        check_valid(nodes, placed, other)
        assert plan.goals_met >= other.goals_met
        if plan.goals_met == other.goals_met:
            assert len(plan.evictions) <= len(other.evictions)
    exact = exact_min_evictions(nodes, placed, goals)
    # where every goal can be met the planner meets them all, within 10 % of the optimum
    if exact is not None:
        assert plan.goals_met == len(goals), (exact, plan)
        assert len(plan.evictions) <= math.ceil(exact * 1.1), (exact, plan)
    if plan.goals_met == len(goals):
        assert exact is None or exact <= len(plan.evictions)


# --- regression cases the greedy alone gets wrong (found against the exact solver) ------


def test_free_node_chosen_for_what_its_eviction_frees() -> None:
    """The 32-node benchmark case in small: the cheapest node to empty frees too few GPUs
    for the free_gpus goal, so the greedy needs 3 evictions where 2 suffice."""
    placed = [
        pod("five", "n1", (0, 1, 2, 3, 4), gph=1.0),
        pod("seven", "n2", (0, 1, 2, 3, 4, 5, 6), gph=2.0),
        pod("nb", "n3", (0,), movable=False),
        pod("seven-b", "n3", (1, 2, 3, 4, 5, 6, 7), gph=2.0),
    ]
    nodes = [node(n, 8, placed) for n in ("n1", "n2", "n3")]
    goals = [Goal("free_nodes", count=1, label="node"), Goal("free_gpus", gpus=10, label="gpus")]
    assert len(plan_greedy(nodes, placed, goals).evictions) == 3
    plan = plan_consolidation(nodes, placed, goals)
    assert plan.goals_met == 2 and len(plan.evictions) == 2
    assert sorted(plan.evictions) == ["ns/seven", "ns/seven-b"]
    check_valid(nodes, placed, plan)


def test_one_multi_gpu_eviction_serves_several_units() -> None:
    """Three free GPUs: one free already, and evicting the 2-GPU pod frees two more; the
    greedy first evicts the fractional pod, which frees only one."""
    placed = [
        pod("fixed", "n0", (0, 2), movable=False),
        pod("half", "n0", (1,), 0.5, gph=3.0),
        pod("pair", "n1", (0, 1), gph=3.0),
    ]
    nodes = [node("n0", 4, placed), node("n1", 2, placed)]
    plan = plan_consolidation(nodes, placed, [Goal("free_gpus", gpus=3, label="g")])
    assert plan.goals_met == 1 and plan.evictions == ["ns/pair"]
    check_valid(nodes, placed, plan)


def test_fractional_jobs_share_gpus_without_evictions() -> None:
    """Two jobs of 4 half GPUs fit one node as it is when the first takes the emptiest GPUs;
    the fullest-first pick leaves the second only three and costs an eviction."""
    placed = [
        pod("a", "n2", (3,), 0.75, movable=False),
        pod("b", "n2", (4,), movable=False),
        pod("c", "n2", (5,), 0.25, movable=False),
        pod("d", "n2", (6,), movable=False),
        pod("e", "n2", (7,), 0.5, movable=False),
        pod("m", "n1", (0,)),
        pod("f", "n1", (1,), 0.5, movable=False),
        pod("g", "n1", (2,), 0.5, movable=False),
        pod("h", "n1", (3,), 0.5, movable=False),
    ]
    nodes = [node("n1", 4, placed), node("n2", 8, placed)]
    goals = [Goal("pending_job", gpus=4, share=0.5, label=f"j{i}") for i in range(2)]
    assert len(plan_greedy(nodes, placed, goals).evictions) == 1
    plan = plan_consolidation(nodes, placed, goals)
    assert plan.goals_met == 2 and not plan.evictions
    assert [t[1] for t in plan.targets] == ["n2", "n2"]
    check_valid(nodes, placed, plan)


def test_every_goal_met_where_the_order_matters() -> None:
    """The greedy gives the free node to the emptiest node and then has no room for the
    3-GPU job; another assignment meets all three goals."""
    placed = [
        pod("a", "n0", (0,), 0.5, movable=False),
        pod("b", "n0", (2,), 0.25, movable=False),
        pod("c", "n1", (3,), 0.5, gph=1.0),
        pod("d", "n2", (1,), 0.5, gph=0.5),
        pod("e", "n2", (3,), 0.25, movable=False),
        pod("f", "n2", (1,), 0.25, movable=False),
        pod("g", "n3", (1,), gph=0.5),
        pod("h", "n3", (0,), 0.25, gph=1.0),
    ]
    nodes = [node("n0", 4, placed), node("n1", 4, placed), node("n2", 4, placed)]
    nodes.append(node("n3", 2, placed))
    goals = [
        Goal("free_nodes", count=1, label="node"),
        Goal("pending_job", gpus=4, share=0.5, label="half"),
        Goal("pending_job", gpus=3, label="three"),
    ]
    assert plan_greedy(nodes, placed, goals).goals_met == 2
    plan = plan_consolidation(nodes, placed, goals)
    assert plan.goals_met == 3 and len(plan.evictions) == 2
    check_valid(nodes, placed, plan)


def test_a_cloned_pod_carries_every_field_and_moves_alone() -> None:
    """World.copy clones pods field by field (cheaper than dataclasses.replace): a field
    added to Pod and left out of the clone would make a search's branches lose it."""
    import dataclasses

    from gpuscope.analytics.consolidation.world import Pod
    from gpuscope.analytics.placement.allocation import Task

    pod = Pod(
        idx=3, node="n1", gpus=(0, 2), share=0.5, movable=True, gph=1.5, res=(4000, 2**30, 0),
        tolerations=frozenset({"gpu"}), mig=(("1g.10gb", 2),), task=Task(cpu_milli=4000),
    )  # fmt: skip
    clone = pod.clone()
    assert clone is not pod
    for f in dataclasses.fields(Pod):
        assert getattr(clone, f.name) == getattr(pod, f.name), f.name
    clone.node, clone.movable = "n2", False
    assert (pod.node, pod.movable) == ("n1", True)
