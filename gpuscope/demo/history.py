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
by the live scraping that follows. The readings are computed in helper processes
(gpuscope/demo/readings.py), each for its share of the nodes, while this one commits the
cycles before them.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from array import array
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import IO, Any

from gpuscope.collector.scraping.batch import Batch, Labels
from gpuscope.collector.storage.store import Store
from gpuscope.core.catalogue import AGENT_METRICS
from gpuscope.demo.readings import KEPT, request
from gpuscope.sim import SimulatedCluster

__all__ = ["KEPT", "fill_history", "monday_before"]

_TYPES: dict[str, str] = {m.name: m.type for m in AGENT_METRICS}
#: Helper processes computing the readings, each for its share of the nodes: the readings
#: cost about twice what the store's runs of cycles do (Python either way), so on 2 cores
#: two helpers and the writer keep both busy.
HELPERS = 2
#: Cycles written in one transaction: 6 hours at 5 minutes (about 400,000 samples of the
#: demo's 256 GPUs, tens of MB of rows held at once).
RUN_CYCLES = 72


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
    helpers: int = HELPERS,
) -> int:
    """Store the cluster's series from ``start`` to ``end`` (Unix seconds) every
    ``step_seconds``; ``targets`` maps each node to its agent's URL (the live scrape's
    target, so the history and the live data are one series each); ``origin`` is the
    scenario's origin in Unix time. ``before(t)`` runs before the cycle at ``t`` is stored
    (the demo records the inventory of that time there: the inventory's tables are not the
    samples', so a run of cycles written after it stores the same). ``run_cycles`` cycles
    are written in one transaction (1: ``append_cycle`` each, as the scrape path does);
    ``helpers`` processes compute the readings, each for its share of the nodes.
    Returns the samples stored.

    The cluster is read as its scenario planted it (pods an action removed are not known
    to the helper process that computes the readings).
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

    # the nodes split between the helper processes, each its share of every frame
    shares = [nodes[i::helpers] for i in range(max(1, min(helpers, len(nodes))))]
    order = [nodes.index(n) for share in shares for n in share]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "gpuscope.demo.readings"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for _ in shares
    ]
    try:
        for proc, share in zip(procs, shares, strict=True):
            assert proc.stdin is not None
            proc.stdin.write(request(cluster.scenario, share, [t - origin for t in times]))
            proc.stdin.close()
        streams = [p.stdout for p in procs if p.stdout is not None]
        for i, t in enumerate(times):
            parts = [node for s in streams for node in _next(s)[1]]
            if before is not None:
                before(t)
            cycle: list[tuple[Batch, float] | None] = [None] * len(nodes)
            for k, (_, new, raw) in zip(order, parts, strict=True):
                if new is not None:  # the node's new layout replaces its last one
                    layouts[k] = new
                names, labels = layouts[k]
                values = array("d")
                values.frombytes(raw)
                # the layout's own lists, not copies: the store knows a page of the same
                # lists by identity and skips resolving its series again (as the scrape
                # path's parser hands back the same lists for a page of the same shape);
                # a layout is replaced, never changed in place
                batch = Batch(urls[k], int(t * 1000), names, labels, values.tolist(), _TYPES)
                cycle[k] = (batch, 0.0)
            pending.append([c for c in cycle if c is not None])
            if len(pending) >= run_cycles:
                stored += flush()
            if progress is not None and i % 48 == 0:
                progress((i + 1) / steps)
        stored += flush()
        for stream in streams:
            _next(stream, "done")
    finally:
        for proc in procs:
            if proc.stdout is not None:
                proc.stdout.close()
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    if progress is not None:
        progress(1.0)
    return stored


def _next(stream: IO[bytes], kind: str = "frame") -> Any:
    """The helper process's next frame, checked to be of ``kind``."""
    try:
        frame = pickle.load(stream)  # noqa: S301 -- our own child process's frames
    except EOFError:
        frame = ("error", "it exited before sending everything")
    if frame[0] != kind:
        raise RuntimeError(f"the demo's readings process failed: {frame[-1]}")
    return frame


def monday_before(t: datetime) -> datetime:
    """00:00 UTC of the Monday of ``t``'s ISO week."""
    day = t.replace(hour=0, minute=0, second=0, microsecond=0)
    return day.fromordinal(day.toordinal() - day.weekday()).replace(tzinfo=t.tzinfo)
