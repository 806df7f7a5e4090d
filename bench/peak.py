"""Peak memory and CPU of one analysis, measured in a process of its own.

The analytics' aims at 10,000 GPUs include a memory bound (4 GB peak RSS), and the
benchmark process itself holds the simulator, earlier results and DuckDB's caches: its own
``ru_maxrss`` says nothing about one analysis. So the analysis runs once in a fresh
interpreter (``spawn``: no pages inherited from this process) that opens the database
read-only, runs the analysis once and reports its own peak RSS (the interpreter, imports
and DuckDB's buffers included: what a ``gpuscope analyze`` process would take), wall
seconds and CPU seconds (user + system, all threads: on 2 cores the CPU can be up to twice
the wall).

The peak is the kernel's high-water mark of the process's own memory map (``VmHWM`` in
/proc/self/status), not ``getrusage``'s ``ru_maxrss``: Linux carries ``ru_maxrss`` over
``fork`` and ``execve``, so a child spawned by a benchmark process of 4.4 GB (one that has
just built the 10,000-GPU history) reported 4.4 GB whatever it did. The exec'd process
gets a new memory map, whose high-water mark starts from nothing.
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.figure import Figure


@dataclass(frozen=True)
class Peak:
    """One run of an analysis in its own process."""

    rss_bytes: int
    wall_s: float
    cpu_s: float  # user + system seconds of the whole process during the call
    summary: str  # what the callable returned, described in a few words


def _child(fn: Callable[..., str], args: tuple[Any, ...], out: Any) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    summary = fn(*args)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out.send(Peak(own_peak_rss(), wall, cpu, summary))


def own_peak_rss() -> int:
    """This process's peak RSS in bytes since its last ``execve`` (``VmHWM``)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def measure(fn: Callable[..., str], *args: Any) -> Peak:
    """Run ``fn(*args)`` once in a spawned process; ``fn`` (module-level: it is pickled by
    name) opens the database itself and returns a short description of its result."""
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(fn, args, send))
    proc.start()
    send.close()
    try:
        got: Peak = recv.recv()
    except EOFError:
        proc.join()
        raise RuntimeError(f"the measured process exited {proc.exitcode}") from None
    proc.join()
    return got


def figure_notes(p: Peak) -> str:
    """How a figure row describes a peak."""
    return (
        f"peak RSS {p.rss_bytes / 2**30:.2f} GiB, {p.wall_s:.1f} s wall, {p.cpu_s:.1f} s CPU "
        f"in a process of its own (interpreter and imports included); {p.summary}"
    )


def rss_figures(default: Peak | None, bounded: Peak, limit: str, *, big: bool) -> list[Figure]:
    """The rows of a full re-analysis's peak RSS: under DuckDB's default memory limit
    (``default``, not run at 10,000 GPUs on a shared machine: None) and under
    ``collector.db_memory_limit`` (``limit``), which carries the 4 GB aim at 10,000 GPUs."""
    rows = []
    if default is not None:
        rows.append(
            Figure(
                "same: peak RSS of the full re-analysis, DuckDB's default memory limit "
                "(80 % of RAM; not run at 10,000 GPUs on a shared machine)",
                default.rss_bytes / 2**30,
                "GiB",
                notes=figure_notes(default),
            )
        )
    rows.append(
        Figure(
            f"same, with collector.db_memory_limit ({limit}, as `gpuscope analyze` opens it)",
            bounded.rss_bytes / 2**30,
            "GiB",
            aim="4 GB at 10,000 GPUs" if big else None,
            notes=figure_notes(bounded),
            key=big,
        )
    )
    return rows
