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
CPU alone. Measured (issue 38, on a loaded 2-core machine): 8 healthy pages and a churning
target at a 2 s interval, the scrape loop at nice 10 beside a busy loop on its core: the
churning page cost 0.14 s of CPU (under the 0.2 s budget: never skipped before) and 7.2 s
stretched, and gave its next 30 ticks away; the healthy targets kept 100 % of their ticks in
the 3-minute runs (12 % before; bench/starved_isolation.py).
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


def ticks_to_skip(
    cpu_seconds: float,
    interval_seconds: float,
    share: float = DEFAULT_SHARE,
    max_skip: int = MAX_SKIP,
) -> int:
    """How many of a target's next ticks to skip after a page that cost ``cpu_seconds``
    (at most ``max_skip``)."""
    if share <= 0 or interval_seconds <= 0 or not math.isfinite(cpu_seconds):
        return 0
    budget = share * interval_seconds
    return min(max_skip, max(0, math.ceil(cpu_seconds / budget) - 1))


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


class Stretch:
    """How much longer than their CPU the process's parses took lately: ``(ran + waited) /
    ran`` over decayed sums of their threads' time on a CPU and waiting for one, each
    sample's weight halving with every ``half_life`` seconds of CPU observed after it. A
    big page (tens of milliseconds of CPU or more) is charged mostly its own stretch; a
    page of a millisecond is charged the recent one, not the noise of one preemption that
    happened to fall inside it (a healthy page's first parse charged 100 times its CPU
    skipped a tick in a test run)."""

    def __init__(self, half_life: float = 0.05) -> None:
        self.half_life = half_life
        self._ran = 0.0
        self._total = 0.0
        self._lock = threading.Lock()

    def add(self, ran: float, waited: float) -> float:
        """Take one parse's times in; the stretch to charge it."""
        ran, waited = max(0.0, ran), max(0.0, waited)
        with self._lock:
            keep = 0.5 ** (ran / self.half_life)
            self._ran = self._ran * keep + ran
            self._total = self._total * keep + ran + waited
            return self._total / self._ran if self._ran > 0 else 1.0


STRETCH = Stretch()


def page_cost(start: Meter, end: Meter, stretch: Stretch = STRETCH) -> tuple[float, float]:
    """(CPU seconds, cost seconds) of the work between two meters of one thread: the cost
    is the CPU stretched by the run-queue wait it met (:class:`Stretch`), the wall time the
    work needed on the CPU the process got. The garbage collector's share stays out of it
    as it stays out of the CPU."""
    cpu = max(0.0, end.own_cpu - start.own_cpu)
    if start.sched is None or end.sched is None:
        return cpu, cpu
    factor = stretch.add(end.sched[0] - start.sched[0], end.sched[1] - start.sched[1])
    return cpu, cpu * max(1.0, factor)
