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

On a starved CPU (the collector at a low priority beside busy processes, or a CPU limit)
CPU time undercounts what a page takes: a page that costs 0.2 s of CPU holds its parsing
thread for 2 s of wall time when the process gets a tenth of a core, and the budget, a share
of the interval, is a share of wall time. So a page's cost (:func:`page_cost`) is its own CPU
stretched by how long its thread waited for a CPU while it was runnable (the kernel's
run-queue wait, ``/proc/thread-self/schedstat``): the time the page needed on this CPU as it
is, without the time its thread slept on a lock, on the GIL or on I/O (those are the other
pages' and the process's, not this page's). Where schedstat is not there, the cost is the
CPU alone. Measured (issue 38): 8 agents and a churning target at a 2 s interval, the
collector at nice 10 beside a busy loop on its core: the churning page cost ~0.1 s of CPU and
~1 s of stretched time, and is now scraped every tenth tick instead of every other one.
"""

from __future__ import annotations

import gc
import math
import os
import threading
import time
from dataclasses import dataclass

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


_SCHEDSTAT = "/proc/thread-self/schedstat"


class _Schedstat(threading.local):
    """Per thread: its schedstat file, kept open (a re-read at offset 0 regenerates it:
    ~5 us against ~35 us for an open and a read); -1 where it cannot be opened."""

    fd: int | None = None


_SCHED = _Schedstat()


def run_and_wait() -> tuple[float, float] | None:
    """This thread's seconds on a CPU and seconds runnable but waiting for one (the first
    two fields of ``/proc/thread-self/schedstat``); None where the kernel gives none."""
    fd = _SCHED.fd
    if fd is None:
        try:
            fd = os.open(_SCHEDSTAT, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            fd = -1
        _SCHED.fd = fd
    if fd < 0:
        return None
    try:
        ran, waited = os.pread(fd, 128, 0).split()[:2]
        return int(ran) / 1e9, int(waited) / 1e9
    except (OSError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Meter:
    """What a page's cost is measured from: its thread's own CPU
    (:func:`own_cpu_seconds`) and its scheduler times (:func:`run_and_wait`)."""

    own_cpu: float
    sched: tuple[float, float] | None

    @classmethod
    def now(cls) -> Meter:
        return cls(own_cpu_seconds(), run_and_wait())


def page_cost(start: Meter, end: Meter) -> tuple[float, float]:
    """(CPU seconds, cost seconds) of the work between two meters of one thread: the cost
    is the CPU stretched by the thread's run-queue wait meanwhile (``cpu * (ran + waited)
    / ran``), the wall time the work needed on the CPU the process got. The stretch is the
    whole interval's, so the garbage collector's share stays out of it as it stays out of
    the CPU."""
    cpu = max(0.0, end.own_cpu - start.own_cpu)
    if start.sched is None or end.sched is None:
        return cpu, cpu
    ran = end.sched[0] - start.sched[0]
    waited = end.sched[1] - start.sched[1]
    if ran <= 0 or waited <= 0:
        return cpu, cpu
    return cpu, cpu * (ran + waited) / ran
