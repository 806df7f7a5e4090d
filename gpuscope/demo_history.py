"""The demo's week of history: the simulated cluster's past, stored through the collector's
ingest path (one :meth:`~collector.store.Store.append_cycle` transaction per cycle, as a
scrape cycle is), so the weekly report, the dashboards' week views and the detectors' long
windows have a week to read.

The series are exactly those the agent exposes for each node at each instant (the same
readings, the same catalogue mapping, the same labels and target), sampled every
``step_seconds`` (5 minutes: the report's resolution) instead of every 15 s, and without the
per-packet and vendor counters no analysis reads. Rendering and parsing the text format is
left out: it is measured in bench/ and exercised by the live scraping that follows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

from collector.batch import Batch, Labels
from collector.store import Store
from gpuscope.catalogue import AGENT_METRICS
from gpuscope.series import node_series
from gpuscope.sim import SimulatedCluster

#: Families the history keeps: what the weekly report, the detectors and the dashboards'
#: week views read (clocks, energy, ECC, NVLink/PCIe, packet and error counters are left to
#: the live data).
KEPT = frozenset({
    "gpuscope_gpu_info", "gpuscope_gpu_up", "gpuscope_gpu_utilization_ratio",
    "gpuscope_gpu_memory_utilization_ratio", "gpuscope_gpu_memory_used_bytes",
    "gpuscope_gpu_memory_total_bytes", "gpuscope_gpu_power_watts",
    "gpuscope_gpu_temperature_celsius", "gpuscope_gpu_sm_active_ratio",
    "gpuscope_gpu_tensor_active_ratio", "gpuscope_gpu_workload_info",
    "gpuscope_gpu_workload_memory_used_bytes", "gpuscope_gpu_workload_utilization_ratio",
    "gpuscope_ib_transmit_bytes", "gpuscope_ib_receive_bytes", "gpuscope_ib_transmit_wait",
    "gpuscope_ib_port_rate_bytes_per_second", "gpuscope_ib_port_up",
})  # fmt: skip
_SPECS = {m.name: m for m in AGENT_METRICS}
_TYPES: dict[str, str] = {m.name: m.type for m in AGENT_METRICS}


def fill_history(
    store: Store,
    cluster: SimulatedCluster,
    targets: Mapping[str, str],
    *,
    start: float,
    end: float,
    sim_time: Callable[[float], float],
    step_seconds: float = 300.0,
    progress: Callable[[float], None] | None = None,
) -> int:
    """Store the cluster's series from ``start`` to ``end`` (Unix seconds) every
    ``step_seconds``; ``targets`` maps each node to its agent's URL (the live scrape's
    target, so the history and the live data are one series each); ``sim_time`` maps Unix
    time onto the scenario's timeline. Returns the samples stored."""
    labels_cache: dict[tuple[str, tuple[str, ...]], tuple[str, Labels]] = {}
    stored = 0
    steps = max(1, int((end - start) // step_seconds))
    for i in range(steps):
        t = start + i * step_seconds
        st = sim_time(t)
        cycle = []
        for node, url in targets.items():
            gpus = cluster.gpu_readings(node, st)
            batch = Batch(url, int(t * 1000), types=_TYPES)
            for name, values, value in node_series(
                node, gpus, cluster.gpu_workloads(node, st, gpus), cluster.ib_readings(node, st)
            ):
                if name not in KEPT:
                    continue
                key = (name, tuple(values))
                hit = labels_cache.get(key)
                if hit is None:
                    spec = _SPECS[name]
                    hit = (spec.sample_name, tuple(sorted(zip(spec.labels, values, strict=True))))
                    labels_cache[key] = hit
                batch.names.append(hit[0])
                batch.labels.append(hit[1])
                batch.values.append(value)
            cycle.append((batch, 0.0))
        stored += sum(store.append_cycle(cycle))
        if progress is not None and i % 48 == 0:
            progress((i + 1) / steps)
    if progress is not None:
        progress(1.0)
    return stored


def monday_before(t: datetime) -> datetime:
    """00:00 UTC of the Monday of ``t``'s ISO week."""
    day = t.replace(hour=0, minute=0, second=0, microsecond=0)
    return day.fromordinal(day.toordinal() - day.weekday()).replace(tzinfo=t.tzinfo)
