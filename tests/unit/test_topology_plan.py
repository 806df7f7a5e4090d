"""Domain-clearing plans for pending pod groups: the chosen domain holds the group after the
moves, and the plan is held to the exact ILP over every domain (fewest evictions), as the
node planner is."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscope.analytics.consolidation.domain import DomainGoal, domain_problem, plan_domain
from gpuscope.analytics.consolidation.model import Placed, Plan
from gpuscope.analytics.placement.allocation import NodeState


def state_after(nodes: list[NodeState], placed: list[Placed], plan: Plan) -> dict[str, list[float]]:
    """Free share of each GPU after the plan's moves (evicted pods gone or moved)."""
    free = {n.name: list(n.gpus) for n in nodes}
    by_key = {p.key: p for p in placed}
    for m in plan.moves:
        p = by_key[f"{m.namespace}/{m.pod}"]
        assert p.movable
        for g in p.gpus:
            free[p.node][g] += p.share
        for g in m.to_gpus:
            free[m.to_node][g] -= p.share
    for name, gpus in free.items():
        assert all(-1e-6 <= f <= 1 + 1e-6 for f in gpus), (name, gpus)
    return free


def holds(free: dict[str, list[float]], members: frozenset[str], pods: int, k: int) -> bool:
    whole = [sum(1 for f in free[m] if f >= 1 - 1e-6) // k for m in members]
    return sum(whole) >= pods


def test_nearly_free_rack_is_cleared_by_moving_its_small_pod_out() -> None:
    """Rack A: two 8-GPU nodes, one 1-GPU pod on a1. Rack B: both nodes half used. The
    2 x 8 job fits after one move out of rack A; rack B would need more."""
    placed = [
        Placed("t", "small", "a1", (0,), movable=True, gpu_hours_lost=0.1),
        Placed("t", "b1-pod", "b1", (0, 1, 2, 3), movable=True, gpu_hours_lost=1.0),
        Placed("t", "b2-pod", "b2", (0, 1, 2, 3), movable=True, gpu_hours_lost=1.0),
    ]
    free = {"a1": {0}, "b1": {0, 1, 2, 3}, "b2": {0, 1, 2, 3}}
    nodes = [
        NodeState(name=n, gpus=tuple(0.0 if g in free.get(n, set()) else 1.0 for g in range(8)))
        for n in ("a1", "a2", "b1", "b2", "c1")
    ]
    domains = {"rack-a": frozenset({"a1", "a2"}), "rack-b": frozenset({"b1", "b2"})}
    goal = DomainGoal("job:t/train", "rack", 2, 8)
    got = plan_domain(nodes, placed, domains, goal)
    assert got is not None
    assert got.domain == "rack-a"
    assert got.plan.evictions == ["t/small"]
    (move,) = got.plan.moves
    assert move.from_node == "a1" and move.to_node not in domains["rack-a"]
    assert holds(state_after(nodes, placed, got.plan), domains["rack-a"], 2, 8)
    assert got.as_dict()["nodes"] == ["a1", "a2"]


def test_no_plan_when_no_domain_can_hold_the_group() -> None:
    placed = [Placed("t", "fixed", "a1", (0,), movable=False, reason_fixed="interactive")]
    nodes = [NodeState(name="a1", gpus=(0.0,) + (1.0,) * 7), NodeState(name="a2", gpus=(1.0,) * 8)]
    got = plan_domain(nodes, placed, {"a": frozenset({"a1", "a2"})}, DomainGoal("g", "r", 2, 8))
    assert got is None


@st.composite
def cases(
    draw: st.DrawFn,
) -> tuple[list[NodeState], list[Placed], dict[str, frozenset[str]], DomainGoal]:
    n_nodes = draw(st.integers(2, 5))
    nodes, placed = [], []
    domains: dict[str, set[str]] = {}
    for i in range(n_nodes):
        name = f"n{i}"
        size = draw(st.sampled_from([4, 8]))
        free = [1.0] * size
        for j in range(draw(st.integers(1, 3))):
            count = draw(st.sampled_from([1, 1, 2]))
            ok = [g for g in range(size) if free[g] >= 1.0]
            if len(ok) < count:
                continue
            gpus = tuple(ok[:count])
            for g in gpus:
                free[g] = 0.0
            placed.append(
                Placed("t", f"p{i}-{j}", name, gpus, movable=draw(st.booleans()),
                       gpu_hours_lost=draw(st.sampled_from([0.5, 1.0, 3.0])))
            )  # fmt: skip
        nodes.append(NodeState(name=name, gpus=tuple(free)))
        domains.setdefault(f"d{draw(st.integers(0, 1))}", set()).add(name)
    for i in range(draw(st.integers(0, 2))):  # room outside every domain to move pods to
        nodes.append(NodeState(name=f"spare{i}", gpus=(1.0,) * draw(st.sampled_from([2, 4]))))
    goal = DomainGoal("g", "rack", draw(st.integers(2, 3)), draw(st.sampled_from([2, 4, 4])))
    return nodes, placed, {d: frozenset(m) for d, m in domains.items()}, goal


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(cases())
def test_domain_plan_vs_exact(
    case: tuple[list[NodeState], list[Placed], dict[str, frozenset[str]], DomainGoal],
) -> None:
    from gpuscope.analytics.consolidation.exact import exact_min_evictions

    nodes, placed, domains, goal = case
    exact = [
        e
        for members in domains.values()
        if (e := exact_min_evictions(*domain_problem(nodes, placed, members, goal))) is not None
    ]
    got = plan_domain(nodes, placed, domains, goal)
    if not exact:
        assert got is None
        return
    assert got is not None, exact
    best = min(exact)
    assert best <= len(got.plan.evictions) <= math.ceil(best * 1.1), (best, got)
    members = domains[got.domain]
    assert {node for _, node in got.plan.targets} <= members
    assert holds(state_after(nodes, placed, got.plan), members, goal.pods, goal.gpus_per_pod)
