"""The demo's week of history: the simulated cluster's past, stored through the collector's
ingest path, so the weekly report, the dashboards' week views and the detectors' long windows
have a week to read. The cycles are written :data:`RUN_CYCLES` at a time
(:meth:`~gpuscope.collector.storage.store.Store.append_cycles`: each cycle prepared as a
scrape cycle is, the run written with one statement per table, the same rows as
``append_cycle`` one cycle at a time, which took two thirds of the demo's time).

The series are exactly those the agent exposes for each node at each instant (the same
readings, the same catalogue mapping, the same labels and target), sampled every
``step_seconds`` (5 minutes: the report's resolution) instead of every 15 s, and without the
per-packet and vendor counters no analysis reads (:data:`~gpuscope.demo.readings.KEPT`).
Rendering and parsing the text format is left out: it is measured in bench/ and exercised
by the live scraping that follows. The readings are computed a run of cycles at a time
(:func:`gpuscope.demo.readings_fast.fast_frames`: the simulator's formulas over arrays of
times, the same values as its readings one by one, tested), in about a tenth of the CPU the
simulator's readings one by one took; the demo computes them in a helper process while it
stores the run before (gpuscope/demo/readings_process.py: the fill 32 s to 20 s).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import closing
from datetime import datetime

from gpuscope.collector.scraping.batch import Batch, Labels
from gpuscope.collector.storage.store import Store
from gpuscope.core.catalogue import AGENT_METRICS
from gpuscope.demo.readings import KEPT, NodeFrame
from gpuscope.demo.readings_fast import fast_frames
from gpuscope.sim import SimulatedCluster

__all__ = ["KEPT", "fill_history", "monday_before"]

_TYPES: dict[str, str] = {m.name: m.type for m in AGENT_METRICS}
#: Cycles written in one transaction: 6 hours at 5 minutes (about 400,000 samples of the
#: demo's 256 GPUs, tens of MB of rows held at once).
RUN_CYCLES = 72
#: What computes the frames: (cluster, nodes, scenario times, run) -> each time's frame;
#: :func:`fast_frames` in this process, or the same in a helper process
#: (:func:`gpuscope.demo.readings_process.frames_in_helper`, what the demo runs).
Readings = Callable[
    [SimulatedCluster, Sequence[str], Sequence[float], int],
    Generator[list[NodeFrame], None, None],
]


def fill_history(
    store: Store,
    cluster: SimulatedCluster,
    targets: Mapping[str, str],
    *,
    start: float,
    end: float,
    origin: float,
    step_seconds: float = 300.0,
    before: Callable[[float], None] | None = None,
    progress: Callable[[float], None] | None = None,
    run_cycles: int = RUN_CYCLES,
    readings: Readings = fast_frames,
) -> int:
    """Store the cluster's series from ``start`` to ``end`` (Unix seconds) every
    ``step_seconds``; ``targets`` maps each node to its agent's URL (the live scrape's
    target, so the history and the live data are one series each); ``origin`` is the
    scenario's origin in Unix time. ``before(t)`` runs before the cycle at ``t`` is stored
    (the demo records the inventory of that time there: the inventory's tables are not the
    samples', so a run of cycles written after it stores the same). ``run_cycles`` cycles
    are written in one transaction (1: ``append_cycle`` each, as the scrape path does).
    ``readings`` computes the frames (:data:`Readings`). Returns the samples stored.
    """
    nodes = list(targets)
    urls = [targets[n] for n in nodes]
    steps = max(1, int((end - start) // step_seconds))
    times = [start + i * step_seconds for i in range(steps)]
    #: each node's current layout (names, labels), by its place in ``nodes``
    layouts: dict[int, tuple[list[str], list[Labels]]] = {}
    stored = 0
    pending: list[list[tuple[Batch, float]]] = []

    def flush() -> int:
        if not pending:
            return 0
        if run_cycles == 1:
            done = sum(store.append_cycle(pending[0]))
        else:
            done = store.append_cycles(pending)
        pending.clear()
        return done

    frames = readings(cluster, nodes, [t - origin for t in times], max(1, run_cycles))
    with closing(frames):  # a helper process computing them ends with the loop
        for i, (t, frame) in enumerate(zip(times, frames, strict=True)):
            if before is not None:
                before(t)
            cycle: list[tuple[Batch, float]] = []
            for k, (_, new, values) in enumerate(frame):
                if new is not None:  # the node's new layout replaces its last one
                    layouts[k] = new
                names, labels = layouts[k]
                # the layout's own lists, not copies: the store knows a page of the same lists
                # by identity and skips resolving its series again (as the scrape path's parser
                # hands back the same lists for a page of the same shape); a layout is
                # replaced, never changed in place
                cycle.append((Batch(urls[k], int(t * 1000), names, labels, values, _TYPES), 0.0))
            pending.append(cycle)
            if len(pending) >= run_cycles:
                stored += flush()
            if progress is not None and i % 48 == 0:
                progress((i + 1) / steps)
    stored += flush()
    if progress is not None:
        progress(1.0)
    return stored


def monday_before(t: datetime) -> datetime:
    """00:00 UTC of the Monday of ``t``'s ISO week."""
    day = t.replace(hour=0, minute=0, second=0, microsecond=0)
    return day.fromordinal(day.toordinal() - day.weekday()).replace(tzinfo=t.tzinfo)
