"""Benchmark: fragmentation analysis over the public Alibaba GPU trace and a large cluster.

Times, best of --runs, ``read_trace`` + ``learn_task_mix`` + ``analyze_fragmentation`` on
the trace's 1213 GPU nodes (6212 GPUs, empty as in the FGD paper) with the default,
gpushare100 and multigpu50 task lists; then ``analyze_fragmentation`` over a simulated
state of 10,000 GPUs (1250 8-GPU nodes, random whole and fractional allocations) with the
default trace's task mix, the size the collector runs every few minutes.
Run: .venv/bin/python bench/fragmentation.py [--quick]  (or `python -m bench --only fragmentation`)
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.figure import Figure, print_figures
from gpuscope.analytics.placement.allocation import ClusterState, NodeState
from gpuscope.analytics.placement.fragmentation import (
    TaskMix,
    analyze_fragmentation,
    learn_task_mix,
)
from gpuscope.analytics.trace import read_trace
from gpuscope.core.settings import AnalyticsSettings

#: The public trace's lists the project keeps (tests/fixtures/alibaba-gpu-v2023/PROVENANCE.md).
CSV = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "alibaba-gpu-v2023" / "csv"
SETTINGS = AnalyticsSettings()
AT = datetime(2025, 1, 1, tzinfo=UTC)


def best(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def trace_run(pods: str) -> Callable[[], Any]:
    def run() -> Any:
        state, tasks = read_trace(CSV / "openb_node_list_gpu_node.csv", CSV / pods)
        mix = learn_task_mix(tasks, SETTINGS.fgd_task_coverage)
        return analyze_fragmentation(state, at=AT, settings=SETTINGS, mix=mix)

    return run


def simulated_state(gpus: int, seed: int = 7) -> ClusterState:
    rng = random.Random(seed)
    nodes = []
    for i in range(gpus // 8):
        free = [rng.choice((0.0, 0.0, 1.0, 1.0, 0.5, 0.25, 0.75, rng.random())) for _ in range(8)]
        nodes.append(
            NodeState(
                name=f"n{i:05d}",
                pool=f"pool-{i % 4}",
                gpu_model="G2",
                gpus=tuple(free),
                cpu_milli_free=rng.randrange(0, 96_000),
                cpu_milli_total=96_000,
            )
        )
    return ClusterState(nodes=tuple(nodes))


def run(quick: bool = False) -> list[Figure]:
    """The public trace's three task lists and a 10,000-GPU state (quick: default list, 800)."""
    runs = 1 if quick else 3
    mixes = ("default",) if quick else ("default", "gpushare100", "multigpu50")
    figures = []
    mix: TaskMix | None = None
    if CSV.is_dir():
        for pods in mixes:
            seconds, result = best(trace_run(f"openb_pod_list_{pods}.csv"), runs)
            s = result.summary
            figures += [
                Figure(
                    f"fragmentation, public Alibaba trace ({pods} tasks): read, task mix, FGD",
                    seconds,
                    "s",
                    notes=f"{s['total_gpus']:,} GPUs, {s['task_mix']['groups']} task groups",
                ),
                Figure(
                    f"FGD fragmentation of free capacity, trace, {pods} tasks",
                    s["fgd_fragmentation_ratio"],
                    "",
                    notes="the empty cluster" if pods == "default" else "",
                ),
            ]
        _, tasks = read_trace(
            CSV / "openb_node_list_gpu_node.csv", CSV / "openb_pod_list_default.csv"
        )
        mix = learn_task_mix(tasks)
    else:
        print(f"trace not found under {CSV}; only the simulated state is timed", file=sys.stderr)
    gpus = 800 if quick else 10_000
    state = simulated_state(gpus)
    seconds, result = best(
        lambda: analyze_fragmentation(state, at=AT, settings=SETTINGS, mix=mix), runs
    )
    figures.append(
        Figure(
            f"fragmentation, a simulated {gpus:,}-GPU cluster",
            seconds,
            "s",
            notes=f"FGD ratio {result.summary['fgd_fragmentation_ratio']:.3f}; best of {runs}",
            key=True,
        )
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    print_figures(run(parser.parse_args().quick))


if __name__ == "__main__":
    main()
