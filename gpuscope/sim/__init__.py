"""The cluster simulator: seeded, deterministic nodes, GPUs, InfiniBand ports and workloads.

One simulated cluster is read by the agent's ``sim`` sources, by the collector's simulated
inventory and by the actuator's simulated backend, so the demo is coherent end to end. It is
a product module with its own tests, not a test helper. Readings are closed-form functions of
time, so any instant of a simulated week can be computed without stepping through it.
"""

from gpuscope.sim.cluster import SimulatedCluster
from gpuscope.sim.scenario import (
    GpuModel,
    NodeSpec,
    ProjectSpec,
    Scenario,
    WorkloadSpec,
    default_scenario,
    load_scenario,
)

__all__ = [
    "GpuModel",
    "NodeSpec",
    "ProjectSpec",
    "Scenario",
    "SimulatedCluster",
    "WorkloadSpec",
    "default_scenario",
    "load_scenario",
]
