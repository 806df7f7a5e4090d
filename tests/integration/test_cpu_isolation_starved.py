"""CPU isolation between targets on a starved CPU (issue 38): 8 healthy agent pages and a
target churning 20,000 new label sets a scrape, the scrape loop at a 2 s interval at nice 10
on one core beside a busy loop at nice 0 pinned to the same core (about a tenth of the core,
less on a loaded machine). Healthy targets must keep at least 95 % of their ticks, counted
(each stored scrape's tick against the ticks its target's schedule spanned), not timed. The
churning target gives away at most 10 ticks after a page here, not the shipped 30: it is
parsed three times as often, and the window that must hold one of its parses takes 16
ticks instead of 36 (the suite's time, issue 39).

Seen: healthy targets kept 87.6 % and 91.1 % of their ticks (12-20 % on this project's
loaded test machine): the churning page's parse cost about the CPU budget, so it was
rarely skipped, and held the process-wide parse lock for seconds of wall time while the
healthy pages waited past their timeout. Now small pages parse in a lane of their own and
the budget charges a page its CPU stretched by its thread's wait for a CPU
(gpuscope/collector/scraping/cpu_budget.py), so on a starved CPU the churning target is
scraped as seldom as the wall time it needs.

The loop's threads get the niceness and the core from the thread that starts them (Linux
threads inherit both), so the test process itself is left alone. The pages are served by a
process on the other core (where there is one).
"""

from __future__ import annotations

import gc
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from gpuscope.collector.scraping.outcome import ScrapeOutcome, Target
from gpuscope.collector.scraping.scrape import Scraper
from gpuscope.collector.scraping.scrape_loop import ScrapeLoop
from tests.integration.helpers import ENV
from tests.integration.test_cpu_isolation import SERVER

pytestmark = pytest.mark.integration
INTERVAL = 2.0
HEALTHY = 8
#: The most ticks the churning target gives away after a page: a third of the shipped
#: MAX_SKIP (30), so it is parsed three times as often as shipped (harder on the healthy
#: targets) and the window, which must hold one of its parses, is a third as long.
MAX_SKIP = 10
#: Ticks the healthy targets are watched for (each), after the window opens: the churning
#: target, held to its budget, is parsed again within MAX_SKIP + 1 ticks.
TICKS = MAX_SKIP + 6
BUSY = "while True: pass"


def _span(scrapes: Sequence[ScrapeOutcome], opened: float) -> int:
    """Ticks of a target's schedule after ``opened`` up to its last scrape."""
    after = [o.scheduled_at for o in scrapes if o.scheduled_at > opened]
    if not after:
        return 0
    return math.floor(max(after) / INTERVAL + 1e-6) - math.floor(opened / INTERVAL + 1e-6)


@pytest.mark.skipif(
    not Path("/proc/thread-self/schedstat").exists(), reason="needs Linux's schedstat"
)
def test_healthy_targets_keep_their_ticks_at_nice_10_beside_a_busy_loop(tmp_path: Path) -> None:
    page = subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "agent", "--gpu-source", "sim", "--once"],
        capture_output=True, check=True, env=ENV,
    ).stdout  # fmt: skip
    (tmp_path / "agent.prom").write_bytes(page)
    cores = sorted(os.sched_getaffinity(0))
    mine, theirs = cores[0], [str(c) for c in cores[1:]] or [str(cores[0])]
    server = subprocess.Popen(
        ["taskset", "-c", ",".join(theirs), sys.executable, "-c", SERVER,
         str(tmp_path / "agent.prom"), "1", str(HEALTHY + 1)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    busy = subprocess.Popen(["taskset", "-c", str(mine), sys.executable, "-c", BUSY])
    assert server.stdout is not None
    word, *given = server.stdout.readline().split()
    assert word == "ready" and len(given) == HEALTHY + 1
    urls = [f"http://127.0.0.1:{p}/metrics" for p in given]
    healthy, churning = urls[:HEALTHY], urls[HEALTHY]
    outcomes: dict[str, list[ScrapeOutcome]] = {u: [] for u in urls}

    def write(group: Sequence[ScrapeOutcome]) -> None:
        # kept without its page's samples, which the collector's writer stores and lets go:
        # kept here, every page's parsed samples (the churning target's 20,000 label sets a
        # page) outlived their scrape, reached the oldest generation and set off full
        # garbage collections of this test process, which on the starved core held every
        # thread for seconds (CI: each healthy target lost the same 3 ticks, 112 of 136)
        for o in group:
            outcomes[o.target.url].append(replace(o, batch=None))

    loop = ScrapeLoop(
        Scraper(timeout_seconds=0.9 * INTERVAL),
        lambda: [Target(u) for u in urls],
        write,
        INTERVAL,
        on_fatal=lambda message: None,
        max_skip=MAX_SKIP,
    )

    def start_starved() -> None:  # the loop's threads inherit this thread's nice and core
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        os.sched_setaffinity(0, {mine})
        loop.start()

    starter = threading.Thread(target=start_starved)
    # The test process's own objects (pytest's, every test module a worker has imported:
    # a full garbage collection walked them in 0.2 s of CPU, seconds of wall time on the
    # starved core, every thread held meanwhile) are left out of the collections, as a
    # collector process has none of them: what a full collection walks in the window is
    # what the scrape loop made (0.05 s standalone).
    gc.freeze()
    try:
        starter.start()
        starter.join()
        # the window opens once every target has been scraped and parsed once (the start's
        # burst of first parses is not the steady state; the bench and the check
        # open theirs so too), and lasts until each healthy target's schedule has spanned
        # TICKS ticks after it (counted by its scrapes and skips, no clock) and the
        # churning target was parsed again inside it
        while True:
            time.sleep(0.5)
            assert server.poll() is None and busy.poll() is None
            parsed = [o for o in outcomes[churning] if o.cpu_seconds > 0]
            if not parsed or any(not outcomes[u] for u in healthy):
                continue
            first = parsed[0]  # the window opens when its parse has ended
            opened = max(first.started_at + first.duration_seconds,
                         *(outcomes[u][0].scheduled_at for u in healthy))  # fmt: skip
            inside = [o for o in parsed if o.scheduled_at > opened]
            spans = [_span(outcomes[u], opened) for u in healthy]
            if min(spans) >= TICKS and inside:
                break
    finally:
        gc.unfreeze()
        loop.stop()
        busy.kill()
        server.kill()
        busy.wait()
        server.wait()
    kept = sum(1 for u in healthy for o in outcomes[u] if o.up and o.scheduled_at > opened)
    spanned = sum(_span(outcomes[u], opened) for u in healthy)
    failures = [o.error for u in healthy for o in outcomes[u] if not o.up][:3]
    t0 = min(o.scheduled_at for u in urls for o in outcomes[u])
    lost = sorted(
        (round((o.scheduled_at - t0) / INTERVAL), o.skipped_ticks)
        for u in healthy
        for o in outcomes[u]
        if o.skipped_ticks
    )
    churned = [
        (round((o.scheduled_at - t0) / INTERVAL), round(o.cpu_seconds, 3), round(o.cost_seconds, 3))
        for o in outcomes[churning]
    ]
    assert kept >= 0.95 * spanned, (kept, spanned, failures, loop.skipped, lost, churned)
    scrapes = outcomes[churning]
    # it was starved: its pages were charged more than their CPU, and it gave ticks away
    assert any(o.cost_seconds > o.cpu_seconds for o in scrapes), scrapes
    assert loop.skipped.get(churning, 0) > 0
