"""Benchmark: the collector's CPU per stored sample beside Prometheus at 8, 16 and 32 agents.

A cycle's fixed cost (the scrape loop's tick, the writer's transaction, the scheduled jobs)
shows more on a small cluster than on 32 agents. For each size, `gpuscope agent --gpu-source
sim` processes (one per simulated node, 8 GPUs each) serve on loopback, and a fresh
`gpuscope collector` (as shipped: analytics, alerts and maintenance on their schedules) and
a fresh Prometheus scrape the first N of them at the same interval in the same window
(bench/collector_process.py's ``phase``: CPU of every thread from /proc over the window,
over the samples each stored in it).

The window is 2 minutes after the warm-up, so the collector's scheduled analytics (every 5
minutes from its start) would never fall in it; each size is therefore measured twice: a
2-minute window as shipped, and a window of the analytics' own interval that holds exactly
one analytics run (its cost per sample as a running collector pays it), for the sizes in
``--long`` (every size by default, as issue 39 asks: 8, 16 and 32).

Run: .venv/bin/python bench/collector_sizes.py [--quick] [--sizes 8,16,32] [--interval S]
(or `python -m bench --only collector_sizes`); about 24 minutes with the defaults.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.collector_process import phase, sim_agents, size_figure
from bench.figure import Figure, Reference, print_figures

SIZES = (8, 16, 32)
WINDOW_S = 120.0
#: The collector's analytics interval as shipped (analytics.interval_minutes).
ANALYTICS_S = 300.0
#: The sizes also measured over ANALYTICS_S: every one (issue 39 asks each size with its
#: scheduled analytics, not only the smallest).
LONG_SIZES = SIZES


def run(
    quick: bool = False,
    sizes: tuple[int, ...] | None = None,
    interval: float | None = None,
    long: tuple[int, ...] | None = None,
) -> list[Figure]:
    chosen = sizes or ((2,) if quick else SIZES)
    step = interval or (2.0 if quick else 5.0)
    window = 20.0 if quick else WINDOW_S
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        root = Path(tmp)
        urls = sim_agents(stack, max(chosen))
        for n in chosen:
            short = phase(root / f"agents-{n}", urls[:n], step, window, None)
            if short is None:
                return [
                    Figure(
                        "collector CPU per stored sample by cluster size",
                        0.0,
                        "",
                        reference=Reference.not_installed("Prometheus"),
                    )
                ]
            figures.append(size_figure(n, step, short, "as shipped; no analytics run in it"))
            if n in (LONG_SIZES if long is None else long) and not quick:
                # the window starts after the warm-up; the analytics' first run is at
                # ANALYTICS_S from the start, so a window of ANALYTICS_S holds one
                whole = phase(root / f"agents-{n}-long", urls[:n], step, ANALYTICS_S, None)
                if whole is not None:
                    figures.append(
                        size_figure(n, step, whole, "holding one scheduled analytics run")
                    )
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 agents, 2 s, 20 s")
    ap.add_argument("--sizes", default=None, help="agent counts, comma-separated")
    ap.add_argument("--interval", type=float, default=None)
    ap.add_argument(
        "--long", default=None, help="sizes also measured over the analytics' interval "
        f"(default {','.join(map(str, LONG_SIZES))}; '' for none)",
    )  # fmt: skip
    args = ap.parse_args()

    def ints(text: str | None) -> tuple[int, ...] | None:
        return None if text is None else tuple(int(s) for s in text.split(",") if s)

    print_figures(run(args.quick, ints(args.sizes), args.interval, ints(args.long)))


if __name__ == "__main__":
    main()
