"""The demo history's readings: the agent's series for a simulated node at a time, kept to
the families the analyses read, and each node's layout (names, labels) told once.

:func:`frames` reads the simulator time by time, as the agent does: exactly what
:func:`gpuscope.core.series.node_series` gives for the simulated readings, kept to
:data:`KEPT`. It is the reference :mod:`gpuscope.demo.readings_fast` (what the demo runs)
is checked against, and that module's fallback.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import is_

from gpuscope.core.catalogue import AGENT_METRICS
from gpuscope.core.series import node_series
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

Labels = tuple[tuple[str, str], ...]
#: A node's layout: its series' sample names and sorted labels, in its order.
Layout = tuple[list[str], list[Labels]]
#: A node's series at one time: (layout id, the layout when it is new to this node, else
#: None, the values). A node whose layout changes gets a new id.
NodeFrame = tuple[int, Layout | None, list[float]]


def kept_items(
    cluster: SimulatedCluster, node: str, t: float
) -> Iterator[tuple[str, list[str], float]]:
    """(family, label values, value) of each kept series of the node at ``t`` (the
    scenario's own time), in the agent's order."""
    gpus = cluster.gpu_readings(node, t)
    for name, label_values, value in node_series(
        node, gpus, cluster.gpu_workloads(node, t, gpus), cluster.ib_readings(node, t)
    ):
        if name in KEPT:
            yield name, label_values, value


class Layouts:
    """Each node's current layout, and the (sample name, labels) objects shared by every
    node and time: the same objects in the same order are the same layout."""

    def __init__(self) -> None:
        self._labels: dict[tuple[str, tuple[str, ...]], tuple[str, Labels]] = {}
        # only each node's current layout is kept (a week's pods come and go: keeping
        # every past layout of every node cost tens of MB, for a node seldom back to one)
        self._current: dict[str, tuple[list[tuple[str, Labels]], int]] = {}
        self._made = 0

    def place(
        self, node: str, series: Sequence[tuple[str, list[str]]]
    ) -> tuple[int, Layout | None]:
        """The layout id of the node's ``series`` (family, label values), and the layout
        itself when it is not the node's last one."""
        hits: list[tuple[str, Labels]] = []
        for name, label_values in series:
            key = (name, tuple(label_values))
            hit = self._labels.get(key)
            if hit is None:
                spec = _SPECS[name]
                pairs = tuple(sorted(zip(spec.labels, label_values, strict=True)))
                hit = self._labels[key] = (spec.sample_name, pairs)
            hits.append(hit)
        last = self._current.get(node)
        if last is not None and len(last[0]) == len(hits) and all(map(is_, last[0], hits)):
            return last[1], None
        layout, self._made = self._made, self._made + 1
        self._current[node] = (hits, layout)
        return layout, ([h[0] for h in hits], [h[1] for h in hits])


def frames(
    cluster: SimulatedCluster, nodes: Sequence[str], times: Sequence[float]
) -> Iterator[list[NodeFrame]]:
    """Each time's frame: one :data:`NodeFrame` per node, in ``nodes`` order."""
    layouts = Layouts()
    for st in times:
        frame: list[NodeFrame] = []
        for node in nodes:
            items = list(kept_items(cluster, node, st))
            layout, new = layouts.place(node, [(n, labels) for n, labels, _ in items])
            frame.append((layout, new, [v for *_, v in items]))
        yield frame
