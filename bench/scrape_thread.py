"""The scrape thread's CPU per page: the real ScrapeLoop and Scraper against real agents.

``python bench/scrape_thread.py --agents 8 --interval 1 --ticks 30 [--profile out.prof]``
starts ``--agents`` `gpuscope agent --gpu-source sim` processes (bench/collector_process.py),
runs the collector's ScrapeLoop on them with a writer that stores nothing, and prints the
scrape thread's CPU (from /proc/self/task/<tid>/stat) per tick and per page over the ticks
after the first few (the first pages' full parses are left out). ``--profile`` writes a
cProfile of the scrape thread alone.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import sys
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack

from bench.collector_process import sim_agents
from gpuscope.collector.scraping.outcome import ScrapeOutcome, Target
from gpuscope.collector.scraping.scrape import Scraper
from gpuscope.collector.scraping.scrape_loop import ScrapeLoop

_TICKS = os.sysconf("SC_CLK_TCK")


def thread_cpu(tid: int) -> tuple[float, float, float]:
    """CPU seconds of thread ``tid`` of this process: on a CPU (schedstat, to the
    nanosecond), and user and system (stat, in clock ticks of 10 ms)."""
    with open(f"/proc/self/task/{tid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        ran = int(f.read().split()[0]) / 1e9
    return ran, int(fields[11]) / _TICKS, int(fields[12]) / _TICKS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--ticks", type=int, default=30)
    ap.add_argument("--warm", type=int, default=3, help="ticks left out at the start")
    ap.add_argument("--profile", default="")
    args = ap.parse_args()
    pages: list[int] = [0]
    up: list[int] = [0]

    def write(outcomes: Sequence[ScrapeOutcome]) -> None:
        pages[0] += len(outcomes)
        up[0] += sum(o.up for o in outcomes)

    prof = cProfile.Profile(time.thread_time) if args.profile else None
    real_run = ScrapeLoop._run_loop

    def run_loop(self: ScrapeLoop, ready: threading.Event) -> None:
        if prof is None:
            real_run(self, ready)
            return
        prof.enable()
        try:
            real_run(self, ready)
        finally:
            prof.disable()

    ScrapeLoop._run_loop = run_loop  # type: ignore[method-assign]
    with ExitStack() as stack:
        urls = sim_agents(stack, args.agents)
        targets = [Target(u) for u in urls]
        loop = ScrapeLoop(
            Scraper(timeout_seconds=min(5.0, args.interval * 0.9)),
            lambda: targets,
            write,
            args.interval,
            on_fatal=lambda why: print("fatal:", why, file=sys.stderr),
        )
        loop.start()
        tid = loop._threads[0].native_id
        assert tid is not None
        time.sleep(args.warm * args.interval)
        cpu0, pages0, wall0 = thread_cpu(tid), pages[0], time.monotonic()
        time.sleep(args.ticks * args.interval)
        cpu1, pages1, wall1 = thread_cpu(tid), pages[0], time.monotonic()
        loop.stop()
    n = max(pages1 - pages0, 1)
    ran, user, system = (b - a for a, b in zip(cpu0, cpu1, strict=True))
    ticks = (wall1 - wall0) / args.interval
    print(
        f"scrape thread: {ran:.3f} s CPU (stat: {user:.2f} user, {system:.2f} system) "
        f"over {ticks:.0f} ticks, {n} pages ({up[0]} up of {pages[0]} in all): "
        f"{ran / ticks * 1e3:.2f} ms a tick, {ran / n * 1e6:.0f} µs a page; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    if prof is not None:
        prof.dump_stats(args.profile)


if __name__ == "__main__":
    main()
