"""Simulated sources: one node of a :class:`~sim.SimulatedCluster`.

They implement the same protocols as the real sources, so the exposition cannot tell them
apart. Used only when asked for (``--gpu-source sim``), never as a fallback.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from gpuscope.core.records import GpuReading, GpuWorkload, IbPortReading
from gpuscope.sim import Scenario, SimulatedCluster

Clock = Callable[[], float]


def scenario_clock(scenario: Scenario, now: Clock = time.time) -> Clock:
    """Map wall-clock time onto the scenario's timeline (seconds from its origin).

    Without an origin in the scenario, a live run starts ``live_offset`` into it, so a
    fresh agent already shows sessions that went idle hours ago.
    """
    origin = scenario.origin if scenario.origin is not None else now() - scenario.live_offset
    return lambda: now() - origin


class SimGpuSource:
    """GPU readings of one simulated node, with DCGM-like profiling fields."""

    def __init__(self, cluster: SimulatedCluster, node: str, clock: Clock) -> None:
        self.name = "sim"
        self._cluster = cluster
        self._node = node
        self._clock = clock

    def read(self) -> Sequence[GpuReading]:
        return self._cluster.gpu_readings(self._node, self._clock())

    def close(self) -> None:
        return None


class SimIbSource:
    """InfiniBand port readings of one simulated node (rail i beside GPU i)."""

    def __init__(self, cluster: SimulatedCluster, node: str, clock: Clock) -> None:
        self.name = "infiniband"
        self._cluster = cluster
        self._node = node
        self._clock = clock

    def read(self) -> Sequence[IbPortReading]:
        return self._cluster.ib_readings(self._node, self._clock())


class SimAttributor:
    """Pod identities of the simulated workloads, as the kubelet would give them."""

    def __init__(self, cluster: SimulatedCluster, node: str, clock: Clock) -> None:
        self.name = "attribution"
        self._cluster = cluster
        self._node = node
        self._clock = clock

    def attribute(self, gpus: Sequence[GpuReading]) -> Sequence[GpuWorkload]:
        known = {g.uuid for g in gpus if g.up}
        return [
            w for w in self._cluster.gpu_workloads(self._node, self._clock()) if w.gpu_uuid in known
        ]
