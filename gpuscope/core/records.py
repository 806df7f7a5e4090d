"""Domain records shared by the agent, the collector and the simulator.

They are frozen so a reading, once taken, cannot be changed by whoever consumes it. A value
of ``None`` means *not available* (the device does not support the field, or the source
could not read it); it is never a stand-in for zero, so exposition leaves such series out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal


class WorkloadKind(StrEnum):
    """What a workload is for; decides which policies may ever touch it."""

    INTERACTIVE = "interactive"
    TRAINING = "training"
    BATCH = "batch"
    INFERENCE = "inference"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One process on a GPU, as the driver lists it."""

    pid: int
    used_memory_bytes: int | None = None
    #: SM utilization of this process from the driver's per-process samples (0..1).
    sm_utilization_ratio: float | None = None
    #: Memory-controller utilization of this process, where sampled (0..1).
    memory_utilization_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class PodRef:
    """A container of a pod, as a source that maps GPUs to pods names it."""

    namespace: str
    pod: str
    container: str = ""
    uid: str = ""


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One reading of one GPU, or of one MIG instance of a GPU.

    A MIG instance is its own reading: ``uuid`` is the MIG device's UUID, ``index`` is the
    parent GPU's index, ``mig_instance`` the GPU-instance id and ``parent_uuid`` the parent.
    A GPU that fell off the bus is reported with ``up=False`` and no values, so it stays
    visible instead of silently vanishing.
    """

    index: int
    uuid: str
    model: str = ""
    driver_version: str = ""
    pci_bus_id: str = ""
    #: ``enabled``, ``disabled`` or ``unsupported``.
    mig_mode: str = "unsupported"
    mig_instance: str = ""
    mig_profile: str = ""
    parent_uuid: str = ""
    up: bool = True
    error: str = ""
    utilization_ratio: float | None = None
    memory_utilization_ratio: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_watts: float | None = None
    temperature_celsius: float | None = None
    energy_joules_total: float | None = None
    sm_clock_hz: float | None = None
    memory_clock_hz: float | None = None
    sm_active_ratio: float | None = None
    tensor_active_ratio: float | None = None
    dram_active_ratio: float | None = None
    ecc_corrected_total: int | None = None
    ecc_uncorrected_total: int | None = None
    nvlink_tx_bytes_total: float | None = None
    nvlink_rx_bytes_total: float | None = None
    pcie_tx_bytes_total: float | None = None
    pcie_rx_bytes_total: float | None = None
    processes: tuple[GpuProcess, ...] = ()
    #: Pods the source itself maps to this GPU (dcgm-exporter does its own pod mapping).
    pods: tuple[PodRef, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuWorkload:
    """One container's use of one GPU: who holds it and what they really use of it."""

    gpu_uuid: str
    namespace: str
    pod: str
    container: str = ""
    workload_kind: WorkloadKind = WorkloadKind.UNKNOWN
    project: str = ""
    #: Sum of the GPU memory of this container's processes on this GPU.
    memory_used_bytes: int | None = None
    #: Sum of the per-process SM utilization samples of this container on this GPU.
    utilization_ratio: float | None = None

    @property
    def interactive(self) -> bool:
        return self.workload_kind is WorkloadKind.INTERACTIVE


@dataclass(frozen=True, slots=True)
class IbPortReading:
    """Counters and state of one InfiniBand (or RoCE) port, in base units.

    Data counters are in bytes (the kernel's 4-octet words already multiplied out).
    ``errors`` and ``hw_counters`` hold only the counters the device has.
    """

    device: str
    port: str
    link_layer: str = ""
    state: str = ""
    phys_state: str = ""
    up: bool | None = None
    rate_bytes_per_second: float | None = None
    transmit_bytes_total: float | None = None
    receive_bytes_total: float | None = None
    transmit_packets_total: float | None = None
    receive_packets_total: float | None = None
    transmit_wait_total: float | None = None
    #: ``True`` when a data counter is a 32-bit counter stuck at its maximum.
    data_counter_saturated: bool = False
    errors: tuple[tuple[str, int], ...] = field(default_factory=tuple)
    hw_counters: tuple[tuple[str, int], ...] = field(default_factory=tuple)
    #: Files of the port that gave no value this scrape, by reason (``unreadable``: an
    #: error on open or read; ``stuck``: a read of the port that has not returned).
    unreadable: tuple[tuple[str, int], ...] = field(default_factory=tuple)
    #: The port could not be read at all this scrape (a read of it still hangs): only
    #: ``unreadable`` says anything.
    stuck: bool = False


Severity = Literal["info", "warning", "critical"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing a detector found, in the shape docs/design.md fixes (stored and served as JSON).

    ``id`` is stable for the same kind and subject (see :func:`finding_id`), so a finding
    that persists across runs updates one row, and one that stops is resolved.
    """

    id: str
    kind: str
    severity: Severity
    #: What it is about: cluster, node, gpu, namespace, pod, project, device/port...
    subject: dict[str, str]
    #: Since when the condition holds (None when not known).
    since: datetime | None
    observed_at: datetime
    #: The numbers that justify it.
    evidence: dict[str, Any] = field(default_factory=dict)
    #: ``{"action": ..., "target": {...}}``, or None.
    recommendation: dict[str, Any] | None = None


def finding_id(kind: str, subject: Mapping[str, str]) -> str:
    """A stable id for a kind and subject: the same inputs give the same id in any run."""
    text = kind + "|" + "|".join(f"{k}={subject[k]}" for k in sorted(subject))
    return f"{kind}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"
