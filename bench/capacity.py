"""Benchmark: the capacity what-if at 10,000 GPUs x 7 days, and on the public Alibaba trace.

``run`` builds the simulated week bench/whatif.py times (``simulated_week``: 1,250 8-GPU
nodes, openb-shaped pods arriving as a Poisson stream at about 90 % of capacity, mean run
24 h) and times, under ``leastallocated`` (the capacity what-if's default policy), the
replay of the cluster as it was and of the cluster with 16 more nodes (128 GPUs), each one
replay as ``gpuscope whatif --add-nodes`` runs it (:func:`gpuscope.analytics.whatif.capacity
.capacity_whatif`); the aim is 60 s a replay. Wall and CPU seconds are both given: on a
machine shared with other work the CPU time is the steadier figure. Then the openb default
trace at 130 % arrivals (the FGD paper's inflation, as ``gpuscope whatif --nodes --pods``
replays it): the search for the fewest GPUs that cut queued GPU-hours by half and by 90 %,
its answers, replays and time. ``--quick``: 800 GPUs for one day, and no trace search.
Run: .venv/bin/python bench/capacity.py [--quick] (or `python -m bench --only capacity`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.figure import Figure
from bench.whatif import CSV, simulated_week
from gpuscope.analytics.trace import read_nodes, read_tasks
from gpuscope.analytics.whatif.capacity import capacity_whatif
from gpuscope.analytics.whatif.capacity_change import AddNodes, Change
from gpuscope.analytics.whatif.events import Inventory, arrivals, inflate
from gpuscope.analytics.whatif.history import History
from gpuscope.analytics.whatif.inputs import DEFAULT_ARRIVALS, FIRST_SEED

POLICY = "leastallocated"
ADDED_NODES = 16


def _timed(fn: Any) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def week(quick: bool) -> list[Figure]:
    gpus, days = (800, 1.0) if quick else (10_000, 7.0)
    inventory, events = simulated_week(gpus, days)
    history = History(inventory, (), tuple(events), 0.0, days * 86_400)
    change = Change(add=(AddNodes("G", ADDED_NODES),))
    wall, cpu, cap = _timed(lambda: capacity_whatif(history, change, POLICY))
    base, new = cap["baseline"], cap["changed"]
    what = f"capacity what-if, simulated {gpus:,}-GPU cluster's {days:g} days, {POLICY}"
    notes = (
        f"{len(events):,} pods; queued {base['queued_gpu_hours']:,.0f} -> "
        f"{new['queued_gpu_hours']:,.0f} GPU-h with {ADDED_NODES * 8} more GPUs; "
        f"{cpu / 2:.1f} s CPU a replay"
    )
    return [
        Figure(
            f"{what}: time per replay (baseline and changed cluster, mean of 2)",
            wall / 2,
            "s",
            aim=None if quick else "<= 60 s a policy",
            notes=notes,
            key=True,
        )
    ]


def trace_search() -> tuple[list[Figure], dict[str, Any]]:
    if not CSV.is_dir():
        print(f"trace not found under {CSV}; no trace search", file=sys.stderr)
        return [], {}
    inventory = Inventory(read_nodes(CSV / "openb_node_list_gpu_node.csv"))
    tasks = read_tasks(CSV / "openb_pod_list_default.csv")
    events = tuple(arrivals(inflate(tasks, inventory.gpu_capacity, DEFAULT_ARRIVALS, FIRST_SEED)))
    history = History(inventory, (), events, 0.0, max(e.arrive for e in events))
    wall, cpu, cap = _timed(lambda: capacity_whatif(history, Change(), POLICY, search=True))
    s = cap["search"]
    answers = []
    for key, label in (("fewest_gpus_half", "half"), ("fewest_gpus_90", "90 %")):
        a = cap[key]
        answers.append(
            f"{label}: {a['gpus']} {a['model']} GPUs ({a['nodes']} nodes)"
            if a
            else f"{label}: none"
        )
    figure = Figure(
        f"capacity search, openb default trace at 130% arrivals ({len(events):,} pods, "
        f"{inventory.gpu_capacity:,} GPUs), {POLICY}",
        wall,
        "s",
        notes=f"{s['replays'] + 1} replays ({cpu:.0f} s CPU), complete: {s['complete']}; "
        f"queued {cap['baseline']['queued_gpu_hours']:,.1f} GPU-h (arrival steps); "
        + "; ".join(answers),
    )
    return [figure], cap


def run(quick: bool = False) -> list[Figure]:
    figures = week(quick)
    if not quick:
        figures += trace_search()[0]
    return figures


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--trace-json", type=Path, help="write the trace's capacity object here")
    args = ap.parse_args()
    for f in week(args.quick):
        print(f"{f.name}: {f.value:.2f} {f.unit} ({f.notes})")
    if not args.quick:
        figs, cap = trace_search()
        for f in figs:
            print(f"{f.name}: {f.value:.1f} {f.unit} ({f.notes})")
        if args.trace_json:
            args.trace_json.write_text(json.dumps(cap, indent=2))
