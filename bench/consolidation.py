"""Benchmark: the consolidation planner against the baselines people use today.

Strategies: the greedy planner alone (``greedy``), the planner as shipped (``planner``: the
greedy plan or a baseline's where better), the descheduler's HighNodeUtilization (``hnu``)
and first-fit decreasing (``ffd``); evictions, goals met, GPU-hours lost and time per
strategy, plus the exact ILP optimum (HiGHS) where it finishes.

Timing: the strategies run in the same loop, round-robin (the one going first rotates), N
rounds on one snapshot: each figure is the median of those N plans of *one* snapshot, with
min and p99, and the rows say so; the HiGHS optimum on small cases joins the loop. At
10,000 GPUs the planner is also timed over a *sequence* of snapshots (the simulated
cluster every hour of its timeline, pods come and go), each planned once per strategy,
round-robin: median and p99 over the snapshots.

Cases: the simulated cluster (``sim`` default scenario through kubectl JSON) at
several sizes, goals = its pending pods + every empty node and 5 % more + every free whole
GPU and 2 % more, up to 1250 8-GPU nodes (10,000 GPUs, the timed case); the public
Alibaba trace (1213 nodes, 6212 GPUs): a prefix of its tasks placed first fit until the
cluster is 90 % allocated, goals from the next tasks and 5 free nodes (80 % of placed
pods movable, seeded).
Run: .venv/bin/python bench/consolidation.py [--quick] [--skip-trace]
(or `python -m bench --only consolidation`)
"""

from __future__ import annotations

import argparse
import functools
import random
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.figure import Figure, Reference, print_figures
from bench.timing import Spread, time_round_robin
from gpuscope.analytics.consolidation.plan import (
    Goal,
    Placed,
    Plan,
    goals_from_pending,
    placement_from_state,
    plan_consolidation,
    plan_first_fit_decreasing,
    plan_greedy,
    plan_high_node_utilization,
)
from gpuscope.analytics.placement.allocation import EPS, NodeState, state_from_records
from gpuscope.analytics.trace import read_trace
from gpuscope.collector.cluster.inventory_records import node_from_json, pod_from_json
from gpuscope.core.collector_settings import WorkloadSettings
from gpuscope.sim import SimulatedCluster, default_scenario
from gpuscope.sim.kube import nodes_json
from gpuscope.sim.kube_pods import pods_json

#: The public trace's lists the project keeps (tests/fixtures/alibaba-gpu-v2023/PROVENANCE.md).
CSV = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "alibaba-gpu-v2023" / "csv"
STRATEGIES: dict[str, Callable[..., Plan]] = {
    "greedy": plan_greedy,
    "planner": plan_consolidation,
    "hnu": plan_high_node_utilization,
    "ffd": plan_first_fit_decreasing,
}


def sim_case(nodes: int, t: float = 3 * 3600.0) -> tuple[list[NodeState], list[Placed], list[Goal]]:
    """The simulated cluster of ``nodes`` nodes as kubectl would list it ``t`` seconds into
    its timeline, and goals that need evictions."""
    cluster = SimulatedCluster(default_scenario(nodes=nodes))
    origin = 1_735_689_600.0
    nj, pj = nodes_json(cluster, origin=origin), pods_json(cluster, t, origin=origin)
    infos = [node_from_json(o) for o in nj["items"]]
    by_name = {n.name: n for n in infos}
    pods = [
        pod_from_json(o, node=by_name.get((o.get("spec") or {}).get("nodeName") or ""))
        for o in pj["items"]
    ]
    state = state_from_records(infos, pods)
    at = datetime.fromtimestamp(origin + t, UTC)
    placed = placement_from_state(
        state, pods, at=at, protected_namespaces=WorkloadSettings().protected_namespaces
    )
    # the sim leaves most nodes idle: ask for every empty node plus 5 % more, and as many
    # whole GPUs as are free plus 2 %, so that the goals need evictions
    empty = sum(1 for n in state.nodes if n.whole_free_gpus == len(n.gpus))
    whole = sum(n.whole_free_gpus for n in state.nodes)
    extra_nodes, extra_gpus = max(2, nodes // 20), max(8, nodes * 8 // 50)
    goals = [
        *goals_from_pending(pods),
        Goal("free_nodes", count=empty + extra_nodes, label="free-nodes"),
        Goal("free_gpus", gpus=whole - 8 * (empty + extra_nodes) + extra_gpus, label="free-gpus"),
    ]
    return list(state.nodes), placed, goals


def trace_case(
    seed: int = 1, fill: float = 0.9, goals: int = 60
) -> tuple[list[NodeState], list[Placed], list[Goal]]:
    state, tasks = read_trace(
        CSV / "openb_node_list_gpu_node.csv", CSV / "openb_pod_list_default.csv"
    )
    rng = random.Random(seed)
    nodes = [n for n in state.nodes if n.gpus]
    free = {n.name: list(n.gpus) for n in nodes}
    total = sum(len(n.gpus) for n in nodes)
    used = 0.0
    placed: list[Placed] = []
    rest = [t for t in tasks if t.gpu_count > 0]
    i = 0
    while used < fill * total and i < len(rest):
        task = rest[i]
        i += 1
        for n in nodes:
            if task.gpu_models and n.gpu_model not in task.gpu_models:
                continue
            f = free[n.name]
            ok = [g for g, x in enumerate(f) if x >= task.gpu_share - EPS][: task.gpu_count]
            if len(ok) < task.gpu_count:
                continue
            for g in ok:
                f[g] -= task.gpu_share
            used += task.gpu_count * task.gpu_share
            movable = rng.random() < 0.8
            placed.append(
                Placed(
                    "trace",
                    task.name or f"t{i}",
                    n.name,
                    tuple(ok),
                    task.gpu_share,
                    movable,
                    "" if movable else "fixed",
                    rng.uniform(0, 8) * task.gpus,
                )
            )
            break
    node_states = [
        NodeState(n.name, n.pool, n.gpu_model, tuple(round(x, 9) for x in free[n.name]))
        for n in nodes
    ]
    goal_list = [
        Goal("pending_job", t.gpu_count, t.gpu_share, label=f"pending-{j}", gpu_models=t.gpu_models)
        for j, t in enumerate(rest[i : i + goals])
    ]
    goal_list.append(Goal("free_nodes", count=5, label="free-5-nodes"))
    return node_states, placed, goal_list


Outcome = dict[str, tuple[Spread, Plan]]


def run_case(
    name: str, case: tuple[list[NodeState], Sequence[Placed], list[Goal]], runs: int, exact: bool
) -> tuple[Outcome, int | None, Spread | None]:
    """Each strategy's (spread of ``runs`` plans, plan), round-robin in one loop; the exact
    optimum's evictions (or None) and its spread, in the same loop when asked for."""
    nodes, placed, goals = case
    gpus = sum(len(n.gpus) for n in nodes)
    print(
        f"{name}: {len(nodes)} nodes, {gpus} GPUs, {len(placed)} pods "
        f"({sum(p.movable for p in placed)} movable), {len(goals)} goals",
        file=sys.stderr,
    )
    peers: dict[str, Callable[[], Any]] = {
        label: functools.partial(fn, nodes, placed, goals) for label, fn in STRATEGIES.items()
    }
    if exact:
        from gpuscope.analytics.consolidation.exact import exact_min_evictions

        peers["exact"] = functools.partial(exact_min_evictions, nodes, placed, goals, time_limit=60)
    timed = time_round_robin(peers, n=runs)
    out: Outcome = {}
    for label in STRATEGIES:
        spread, plan = timed[label].product, timed[label].result
        out[label] = (spread, plan)
        print(
            f"  {label:8s} evictions {len(plan.evictions):4d}  moves "
            f"{sum(1 for m in plan.moves if m.to_node):4d}  goals met {plan.goals_met:3d}"
            f"/{len(goals)}  gpu-h lost {plan.gpu_hours_lost:9.1f}  "
            f"median {spread.median * 1000:8.1f} ms",
            file=sys.stderr,
        )
    if not exact:
        return out, None, None
    return out, timed["exact"].result, timed["exact"].product


def sequence_case(nodes: int, snapshots: int) -> dict[str, Spread]:
    """The strategies over ``snapshots`` snapshots of the simulated cluster, an hour apart
    on its timeline, each planned once per strategy, round-robin: spread over snapshots."""
    times: dict[str, list[float]] = {label: [] for label in STRATEGIES}
    for k in range(snapshots):
        nodes_, placed, goals = sim_case(nodes, t=(1 + k) * 3600.0)
        peers = {
            label: functools.partial(fn, nodes_, placed, goals) for label, fn in STRATEGIES.items()
        }
        # rotate who goes first with the snapshot
        names = list(peers)
        order = names[k % len(names) :] + names[: k % len(names)]
        for label, t in time_round_robin({n: peers[n] for n in order}, n=1).items():
            times[label].append(t.product.median)
    return {label: Spread.of(ts) for label, ts in times.items()}


def _scaled(spread: Spread) -> tuple[Spread, str]:
    return (spread.scaled(1000), "ms") if spread.median < 1 else (spread, "s")


def figures_for(
    name: str, goals: int, out: Outcome, exact: int | None, detail: bool
) -> list[Figure]:
    spread, plan = out["planner"]
    hnu, ffd = out["hnu"][1], out["ffd"][1]
    baselines = "descheduler HighNodeUtilization-style"

    def ref(value: float, ffd_value: float, unit: str) -> Reference:
        return Reference(f"{baselines}; first-fit decreasing {ffd_value:,.0f}", value, unit)

    big = "10,000" in name
    shown, unit = _scaled(spread)
    hnu_time = out["hnu"][0].scaled(1000 if unit == "ms" else 1)
    ffd_ms = out["ffd"][0].median * 1000
    figures = [
        Figure.timed(
            f"consolidation plan, {name}: one snapshot planned {spread.n} times",
            shown,
            unit,
            aim="< 2 s" if big else None,
            reference=Reference.timed(
                f"{baselines}, same loop; first-fit decreasing {ffd_ms:,.1f} ms", hnu_time, unit
            ),
            key=big,
        ),
        Figure(
            "same: evictions",
            len(plan.evictions),
            "",
            reference=Reference("exact optimum (HiGHS), same loop", exact, "")
            if exact is not None
            else ref(len(hnu.evictions), len(ffd.evictions), ""),
            notes=f"goals met {plan.goals_met}/{goals}",
        ),
    ]
    if detail:
        figures += [
            Figure(
                "same: GPU-hours of work lost",
                plan.gpu_hours_lost,
                "GPU-h",
                reference=ref(hnu.gpu_hours_lost, ffd.gpu_hours_lost, "GPU-h"),
                key=big,
            ),
            Figure(
                "same: goals met",
                plan.goals_met,
                f"of {goals}",
                reference=ref(hnu.goals_met, ffd.goals_met, f"of {goals}"),
            ),
        ]
    return figures


def sequence_figures(nodes: int, spreads: dict[str, Spread]) -> list[Figure]:
    planner, unit = _scaled(spreads["planner"])
    hnu = spreads["hnu"].scaled(1000 if unit == "ms" else 1)
    ffd_ms = spreads["ffd"].median * 1000
    return [
        Figure.timed(
            f"consolidation plan, simulated {nodes * 8:,} GPUs: a sequence of {planner.n} "
            "snapshots an hour apart, each planned once",
            planner,
            unit,
            aim="< 2 s" if nodes * 8 >= 10_000 else None,
            reference=Reference.timed(
                f"descheduler HighNodeUtilization-style, same loop; first-fit decreasing "
                f"{ffd_ms:,.1f} ms",
                hnu,
                unit,
            ),
            notes="median and p99 over the snapshots",
        )
    ]


def run(quick: bool = False, *, trace: bool = True) -> list[Figure]:
    """Simulated clusters of 32..1,250 nodes and the public trace (quick: 32 nodes only)."""
    runs = 3 if quick else 5
    figures = []
    for n in (32,) if quick else (32, 128, 512, 1250):
        case = sim_case(n)
        out, exact, _ = run_case(f"sim {n} nodes", case, runs, exact=n <= 32)
        name = f"simulated {n * 8:,} GPUs ({n:,} nodes)"
        figures += figures_for(name, len(case[2]), out, exact, detail=n in {32, 1250})
    big, snapshots = (32, 3) if quick else (1250, 4)
    figures += sequence_figures(big, sequence_case(big, snapshots))
    if trace and not quick and CSV.is_dir():
        case = trace_case()
        out, _, _ = run_case("alibaba trace", case, runs, exact=False)
        figures += figures_for(
            "public Alibaba trace, 90 % allocated", len(case[2]), out, None, True
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-trace", action="store_true")
    args = parser.parse_args()
    print_figures(run(args.quick, trace=not args.skip_trace))


if __name__ == "__main__":
    main()
