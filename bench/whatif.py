"""Benchmark and experiment: the what-if replay on the public Alibaba trace (FGD paper).

``run`` times one seed of each policy on the openb default trace (1213 nodes, 6212 GPUs)
with the paper's arrival inflation to 130 % of GPU capacity (quick: 30 %), and sets each
policy's allocation beside the FGD simulator's published figure (its expected-results
file, mean of seeds 42-51) as the reference. ``--experiment N`` runs seeds 42..41+N of
every policy, prints the Markdown table of docs/analytics.md and, with ``--plot PNG``,
draws the allocation curve.
Run: .venv/bin/python bench/whatif.py [--quick] [--experiment N --plot docs/img/whatif_openb.png]
(or `python -m bench --only whatif`)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.figure import Figure, Reference, print_figures
from gpuscope.analytics.placement.allocation import NodeState
from gpuscope.analytics.placement.fragmentation import learn_task_mix
from gpuscope.analytics.trace import read_nodes, read_tasks
from gpuscope.analytics.whatif import POLICIES, Inventory, PodEvent, PolicyResult, Request, replay
from gpuscope.analytics.whatif.events import arrivals, inflate

CSV = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "alibaba-gpu-v2023" / "csv"
#: Allocation (%) at 130 % arrivals in the FGD simulator's expected results
#: (experiments/analysis/expected_results/analysis_allo_discrete.csv, openb_pod_list_default;
#: mean of seeds 42-51). No Kubernetes policies there.
PAPER = {"random": 87.47, "dotprod": 90.85, "bestfit": 93.08, "fgd": 95.39}
ARRIVALS = 1.3


def load() -> tuple[Inventory, list[Any]]:
    inventory = Inventory(read_nodes(CSV / "openb_node_list_gpu_node.csv"))
    return inventory, read_tasks(CSV / "openb_pod_list_default.csv")


def one(
    inventory: Inventory, tasks: list[Any], policy: str, seed: int, share: float
) -> tuple[float, PolicyResult]:
    """Seconds for one replay (inflation included) and its result."""
    t0 = time.perf_counter()
    mix = learn_task_mix(tasks)
    events = arrivals(inflate(tasks, inventory.gpu_capacity, share, seed))
    result = replay(inventory, events, policy, seed=seed, mix=mix, drop=True)
    return time.perf_counter() - t0, result


def run(quick: bool = False) -> list[Figure]:
    """One seed per policy at 130 % arrivals (quick: 30 %)."""
    if not CSV.is_dir():
        print(f"trace not found under {CSV}; nothing to time", file=sys.stderr)
        return []
    inventory, tasks = load()
    share = 0.3 if quick else ARRIVALS
    figures = []
    for policy in POLICIES:
        seconds, result = one(inventory, tasks, policy, 42, share)
        figures.append(
            Figure(
                f"what-if replay, openb default trace, {policy}, {share:.0%} arrivals, one seed",
                seconds,
                "s",
                aim="< 30 s on 2 cores",
                notes=f"{result.jobs_arrived:,} pods, {inventory.gpu_capacity:,} GPUs",
                key=True,
            )
        )
        figures.append(
            Figure(
                f"what-if allocation at {share:.0%} arrivals, {policy} (seed 42)",
                round(result.allocation_ratio * 100, 2),
                "%",
                reference=Reference("FGD simulator's published result", PAPER[policy], "%")
                if policy in PAPER and not quick
                else None,
            )
        )
    return figures + week_figures(quick)


def simulated_week(gpus: int, days: float, seed: int = 7) -> tuple[Inventory, list[PodEvent]]:
    """A cluster of 8-GPU nodes and ``days`` of openb-shaped pods arriving as a Poisson
    stream with exponential run times (mean 24 h), at a load of about 90 % of GPU
    capacity: departures, queueing and retries, as a stored week has them."""
    rng = random.Random(seed)
    nodes = tuple(
        NodeState(
            name=f"n{i:05d}",
            gpu_model="G",
            gpus=(1.0,) * 8,
            cpu_milli_free=128_000,
            cpu_milli_total=128_000,
        )
        for i in range(gpus // 8)
    )
    tasks = [replace(t, gpu_models=frozenset(), gpu_spec="") for t in load()[1]]
    mean_gpus = statistics.fmean(t.gpus for t in tasks)
    mean_hours = 24.0
    rate = 0.9 * gpus / (mean_gpus * mean_hours) / 3600  # arrivals per second
    events: list[PodEvent] = []
    now, horizon = 0.0, days * 86_400
    while now < horizon:
        now += rng.expovariate(rate)
        task = tasks[rng.randrange(len(tasks))]
        events.append(
            PodEvent(
                f"p{len(events)}", Request(task), now, rng.expovariate(1 / (mean_hours * 3600))
            )
        )
    return Inventory(nodes), events


def week_figures(quick: bool) -> list[Figure]:
    gpus, days = (800, 1.0) if quick else (10_000, 7.0)
    inventory, events = simulated_week(gpus, days)
    mix = learn_task_mix([e.request.task for e in events])
    figures = []
    for policy in POLICIES:  # the aim is per policy: every one of them
        t0, c0 = time.perf_counter(), time.process_time()
        r = replay(inventory, events, policy, seed=42, mix=mix, until=days * 86_400)
        figures.append(
            Figure(
                f"what-if replay of a simulated {gpus:,}-GPU cluster's {days:g} days, {policy}",
                time.perf_counter() - t0,
                "s",
                aim="< 60 s on 2 cores" if not quick else None,
                notes=f"{len(events):,} pods with departures; "
                f"{r.jobs_never_started:,} never started; "
                f"{time.process_time() - c0:.1f} s CPU",
                key=policy in ("leastallocated", "fgd"),
            )
        )
    return figures


def experiment(seeds: int) -> dict[str, Any]:
    """Every policy on seeds 42.., the allocation curve at 0..130 % arrivals (per cent)."""
    inventory, tasks = load()
    out: dict[str, Any] = {"capacity_gpus": inventory.gpu_capacity, "policies": {}}
    for policy in POLICIES:
        runs = []
        for seed in range(42, 42 + seeds):
            seconds, r = one(inventory, tasks, policy, seed, ARRIVALS)
            runs.append(
                {
                    "seed": seed,
                    "seconds": round(seconds, 2),
                    "allocation": round(r.allocation_ratio * 100, 3),
                    "unallocated_gpus": round(r.unallocated_gpus, 1),
                    "fgd_ratio": round(r.fgd_ratio, 4),
                    "curve": [round(r.allocation_at(x / 100) * 100, 3) for x in range(131)],
                }
            )
            print(
                f"{policy} seed {seed}: {runs[-1]['allocation']} % in {seconds:.1f} s",
                file=sys.stderr,
                flush=True,
            )
        out["policies"][policy] = runs
    return out


def table(data: dict[str, Any]) -> str:
    cap = data["capacity_gpus"]
    lines = [
        "| policy | allocation at 130 % (mean, min-max) | unallocated GPUs "
        "| FGD simulator (paper) | difference |",
        "| --- | --- | --- | --- | --- |",
    ]
    for policy, runs in data["policies"].items():
        alloc = [r["allocation"] for r in runs]
        mean = statistics.fmean(alloc)
        paper = PAPER.get(policy)
        lines.append(
            f"| {policy} | {mean:.2f} % ({min(alloc):.2f}-{max(alloc):.2f}) | "
            f"{cap * (1 - mean / 100):.0f} | "
            + (
                f"{paper:.2f} % ({cap * (1 - paper / 100):.0f} GPUs) | {mean - paper:+.2f} pt |"
                if paper is not None
                else "— | — |"
            )
        )
    return "\n".join(lines) + "\n"


def plot(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    xs = list(range(131))
    for policy, runs in data["policies"].items():
        mean = [statistics.fmean(r["curve"][x] for r in runs) for x in xs]
        ax.plot(xs, mean, label=policy)
    for policy, value in PAPER.items():
        ax.scatter([130], [value], marker="x", color="black", zorder=5)
        ax.annotate(
            f"paper {policy}", (130, value), textcoords="offset points", xytext=(4, -3), fontsize=7
        )
    ax.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlim(60, 150)
    ax.set_ylim(60, 100)
    ax.set_xlabel("arrived GPU requests, % of cluster GPU capacity")
    ax.set_ylabel("allocated GPUs, % of capacity")
    ax.set_title("openb default trace, 6,212 GPUs: allocation as arrivals grow")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--experiment", type=int, metavar="SEEDS")
    parser.add_argument("--data", type=Path, help="experiment JSON to write (or read with --plot)")
    parser.add_argument("--plot", type=Path, metavar="PNG")
    args = parser.parse_args()
    if args.experiment:
        data = experiment(args.experiment)
        if args.data:
            args.data.write_text(json.dumps(data))
    elif args.data and args.plot:
        data = json.loads(args.data.read_text())
    else:
        print_figures(run(args.quick))
        return
    print(table(data), end="")
    if args.plot:
        plot(data, args.plot)


if __name__ == "__main__":
    main()
