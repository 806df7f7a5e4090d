"""The exact consolidation optimum for small instances: an ILP solved with HiGHS.

For tests and benchmarks only (``highspy`` is a dev dependency): it measures the gap of the
greedy planner in :mod:`gpuscope.analytics.consolidation.plan`. The model is the planner's:

    e_p       1 if movable pod p is evicted
    z_{u,n}   1 if goal unit u is placed on node n (eligible nodes only)
    w_{u,n,g} 1 if unit u uses GPU g of node n

    min  sum_p e_p
    s.t. sum_n z_{u,n} = 1                                    every unit is met
         sum_g w_{u,n,g} = k_u z_{u,n}                        k GPUs on one node
         sum_u s_u w_{u,n,g} - sum_{p on g} s_p e_p <= free_g  no GPU over-committed
         sum_u r_u z_{u,n} - sum_{p on n} r_p e_p <= free_r(n)  for r in CPU, memory,
                                                      storage (where the node counts it)
         sum_u m_u z_{u,n} - sum_{p on n} m_p e_p <= free_m(n)  for every MIG profile m
         sum_{p in B} e_p <= disruptionsAllowed(B)            for every PodDisruptionBudget B

A unit's eligible nodes are the world's (:meth:`World.eligible`: Ready, taints tolerated,
GPU model and node selector allowed, MIG profile offered); every movable pod may be
evicted, with GPUs or without (a CPU-only pod frees CPU, memory and storage). Evicted pods
may always go back to pending, so where they go does not change the count.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscope.analytics.consolidation.model import Goal, Placed
from gpuscope.analytics.consolidation.world import World, units_of
from gpuscope.analytics.placement.allocation import NodeState

#: Above this many variables the instance is left to the planner.
MAX_VARIABLES = 20_000


def exact_min_evictions(
    nodes: Sequence[NodeState],
    placed: Sequence[Placed],
    goals: Sequence[Goal],
    *,
    max_evictions: int | None = None,
    time_limit: float = 10.0,
) -> int | None:
    """The fewest evictions that meet every goal; None when infeasible, too large, or not
    proven optimal within ``time_limit`` seconds."""
    import highspy

    world = World(nodes, placed)
    units = units_of(goals)
    movable = [p for p in world.pods if p.movable]
    cols: list[tuple[float, float]] = []  # (cost, upper bound); all binary

    def new(cost: float) -> int:
        cols.append((cost, 1.0))
        return len(cols) - 1

    e = {p.idx: new(1.0) for p in movable}
    rows: list[tuple[float, float, list[int], list[float]]] = []
    gpu_terms: dict[tuple[str, int], list[tuple[int, float]]] = {}
    #: (node, resource index) -> terms; resource rows as GPU rows, in CPU/MiB units
    res_terms: dict[tuple[str, int], list[tuple[int, float]]] = {}
    mig_terms: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for p in movable:
        for profile, count in p.mig:
            mig_terms.setdefault((p.node, profile), []).append((e[p.idx], -float(count)))
        for g in p.gpus:
            gpu_terms.setdefault((p.node, g), []).append((e[p.idx], -p.share))
        for r in range(3):
            if p.res[r]:
                res_terms.setdefault((p.node, r), []).append((e[p.idx], -float(p.res[r])))
    for unit in units:
        zs = []
        for node in world.nodes:
            name = node.name
            if not world.eligible(name, unit):
                continue
            k = world.k_of(name, unit)
            z = new(0.0)
            zs.append(z)
            for r in range(3):
                if unit.res[r]:
                    res_terms.setdefault((name, r), []).append((z, float(unit.res[r])))
            for profile, count in unit.mig:
                mig_terms.setdefault((name, profile), []).append((z, float(count)))
            if k == 0:  # MIG instances only: no GPU share
                continue
            ws = []
            for g in range(len(node.gpus)):
                w = new(0.0)
                ws.append(w)
                gpu_terms.setdefault((name, g), []).append((w, unit.share))
            rows.append((0.0, 0.0, [*ws, z], [1.0] * len(ws) + [-float(k)]))
            if len(cols) > MAX_VARIABLES:
                return None
        if not zs:
            return None
        rows.append((1.0, 1.0, zs, [1.0] * len(zs)))
    for (name, g), terms in gpu_terms.items():
        if any(v > 0 for _, v in terms):
            free = world.free[name][g]
            rows.append(
                (-highspy.kHighsInf, free + 1e-7, [i for i, _ in terms], [v for _, v in terms])
            )
    for (name, r), terms in res_terms.items():
        if world.counted[name][r] and any(v > 0 for _, v in terms):
            rows.append(
                (
                    -highspy.kHighsInf,
                    float(world.res[name][r]),
                    [i for i, _ in terms],
                    [v for _, v in terms],
                )
            )
    for (name, profile), terms in mig_terms.items():
        if any(v > 0 for _, v in terms):
            have = float(world.mig[name].get(profile, 0))
            rows.append((-highspy.kHighsInf, have, [i for i, _ in terms], [v for _, v in terms]))
    if max_evictions is not None and e:
        rows.append((0.0, float(max_evictions), list(e.values()), [1.0] * len(e)))
    by_budget: dict[int, list[int]] = {}
    for p in movable:
        if p.budget >= 0:
            by_budget.setdefault(p.budget, []).append(e[p.idx])
    for b, cols_b in by_budget.items():  # a budget's disruptions, spent across the plan
        rows.append((0.0, float(world.allow[b]), cols_b, [1.0] * len(cols_b)))

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("threads", 1)
    for cost, ub in cols:
        h.addCol(cost, 0.0, ub, 0, [], [])
    if cols:
        h.changeColsIntegrality(
            len(cols), list(range(len(cols))), [highspy.HighsVarType.kInteger] * len(cols)
        )
    for lo, hi, idx, val in rows:
        h.addRow(lo, hi, len(idx), idx, val)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    return round(float(h.getInfo().objective_function_value))
