"""A CPU budget per target, so one target cannot starve the others of the collector's CPU.

Every target's page is parsed and admitted (limits, relabelling, series bookkeeping) in one
interpreter, one page at a time. A target that sends 20,000 new label sets a scrape costs a
second or more of CPU per page; on a collector with one core or less, the healthy targets'
parses then wait behind it and their scrapes miss their ticks (measured: 0.24 scrapes/s a
target instead of 0.89). Prometheus isolates nothing here either; gpuscope measures the CPU
each page's parse and admission took (the parsing thread's own CPU time, not the wait for
the parse lock) and scrapes a target whose page costs more than its share of the interval
less often: a page that cost ``k`` times the budget is followed by ``k - 1`` skipped ticks,
so every target averages at most its share. Healthy pages cost far less than their share and
are never skipped.

A page's cost is its parsing thread's CPU time less the time that thread spent in Python's
garbage collector meanwhile (:func:`own_cpu_seconds`): a full collection walks every live
object of the process (mostly the churning targets' caches) and runs in whichever thread
allocates at that moment, so charged to the page it interrupted it silenced a healthy target
for 26 ticks in a test run (a 69 KB page charged about half a second).
"""

from __future__ import annotations

import gc
import math
import threading
import time

#: The share of the scrape interval one target's parse and admission may take on average.
DEFAULT_SHARE = 0.1
#: The most ticks skipped after one page: a target is never silenced for long.
MAX_SKIP = 30


def ticks_to_skip(cpu_seconds: float, interval_seconds: float, share: float = DEFAULT_SHARE) -> int:
    """How many of a target's next ticks to skip after a page that cost ``cpu_seconds``."""
    if share <= 0 or interval_seconds <= 0 or not math.isfinite(cpu_seconds):
        return 0
    budget = share * interval_seconds
    return min(MAX_SKIP, max(0, math.ceil(cpu_seconds / budget) - 1))


class _GcTime(threading.local):
    """Per thread: CPU seconds spent in the garbage collector, and when the current
    collection started (None outside one)."""

    total = 0.0
    started: float | None = None


_GC = _GcTime()


def _on_gc(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _GC.started = time.thread_time()
    elif _GC.started is not None:
        _GC.total += time.thread_time() - _GC.started
        _GC.started = None


gc.callbacks.append(_on_gc)


def own_cpu_seconds() -> float:
    """This thread's CPU time, less what it spent in the garbage collector: differences of
    it are what a page's parse cost itself (the collector's pauses are the process's)."""
    return time.thread_time() - _GC.total
