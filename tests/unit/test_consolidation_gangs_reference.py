"""The gang planner against a brute-force reference that shares no code with it: on random
small clusters of whole-GPU pods, a pending group of N pods x k GPUs that must stay inside
one domain is planned exactly when some set of movable pods, evicted, lets one domain hold
it, with no more evictions than the fewest such set needs (+10 %); and the plan, executed,
leaves its domain holding the group on the nodes it names."""

from __future__ import annotations

import itertools
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscope.analytics.consolidation.gangs import GangGoal, plan_with_gangs
from gpuscope.analytics.consolidation.model import Goal, Placed
from gpuscope.analytics.placement.allocation import NodeState

Case = tuple[list[NodeState], list[Placed], dict[str, frozenset[str]], int, int]


def fewest_evictions(
    nodes: list[NodeState], placed: list[Placed], domains: dict[str, frozenset[str]],
    pods: int, k: int,
) -> int | None:  # fmt: skip
    """Try every set of movable pods, smallest first: evicted, do a domain's nodes hold
    ``pods`` pods of ``k`` whole GPUs? (Evicted pods leave; where they go is not asked.)"""
    movable = [p for p in placed if p.movable]
    free0 = {n.name: sum(1 for g in n.gpus if g >= 1.0) for n in nodes}
    for size in range(len(movable) + 1):
        for chosen in itertools.combinations(movable, size):
            free = dict(free0)
            for p in chosen:
                free[p.node] += len(p.gpus)
            if any(sum(free[m] // k for m in d) >= pods for d in domains.values()):
                return size
    return None


@st.composite
def cases(draw: st.DrawFn) -> Case:
    nodes, placed = [], []
    domains: dict[str, set[str]] = {}
    for i in range(draw(st.integers(2, 5))):
        name = f"n{i}"
        size = draw(st.sampled_from([4, 8]))
        free = [1.0] * size
        for j in range(draw(st.integers(0, 3))):
            count = draw(st.sampled_from([1, 2, 4]))
            ok = [g for g in range(size) if free[g] >= 1.0][:count]
            if len(ok) < count:
                continue
            for g in ok:
                free[g] = 0.0
            placed.append(Placed("t", f"p{i}-{j}", name, tuple(ok), movable=draw(st.booleans()),
                                 gpu_hours_lost=draw(st.sampled_from([0.5, 1.0, 2.0]))))  # fmt: skip
        nodes.append(NodeState(name=name, gpus=tuple(free)))
        domains.setdefault(f"d{draw(st.integers(0, 2))}", set()).add(name)
    pods, k = draw(st.integers(2, 3)), draw(st.sampled_from([2, 4, 8]))
    return nodes, placed, {d: frozenset(m) for d, m in domains.items()}, pods, k


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(cases())
def test_gang_plan_against_brute_force(case: Case) -> None:
    nodes, placed, domains, pods, k = case
    gang = GangGoal(Goal("pending_job", gpus=k, count=pods, label="g"), "rack", "required", domains)
    plan, (outcome,) = plan_with_gangs(nodes, placed, [], [gang])
    best = fewest_evictions(nodes, placed, domains, pods, k)
    if best is None:
        assert not outcome.domain and outcome.reason
        assert plan.evictions == []
        return
    assert outcome.domain, (best, outcome)
    assert best <= len(plan.evictions) <= math.ceil(best * 1.1), (best, plan)
    # executed: every evicted pod leaves (or moves), the group's pods go to the nodes named
    free = {n.name: sum(1 for g in n.gpus if g >= 1.0) for n in nodes}
    by_key = {p.key: p for p in placed}
    for m in plan.moves:
        p = by_key[f"{m.namespace}/{m.pod}"]
        assert p.movable
        free[p.node] += len(p.gpus)
        if m.to_node:
            free[m.to_node] -= len(m.to_gpus)
    targets = [node for label, node in plan.targets if label == "g"]
    assert len(targets) == pods and set(targets) <= domains[outcome.domain]
    for node in set(targets):
        free[node] -= k * targets.count(node)
    assert all(f >= 0 for f in free.values()), free
