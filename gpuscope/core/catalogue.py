"""The metric catalogue: every series the node agent exports, with its type and labels.

It is the single source of truth that the agent's exposition is built from and that
contract tests check dashboards, alert rules and the collector's ingest against. Names
follow Prometheus conventions (base units, ``_total`` counters, ``_ratio`` for 0..1).
Renaming a metric needs a migration note in docs/metrics.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter"]

#: Labels every per-GPU series carries. ``mig_instance`` is empty for a whole GPU.
GPU_LABELS: tuple[str, ...] = ("node", "gpu", "uuid", "mig_instance")
#: Labels of a pod's use of a GPU.
WORKLOAD_LABELS: tuple[str, ...] = (*GPU_LABELS, "namespace", "pod", "container")
#: Labels every InfiniBand port series carries.
IB_LABELS: tuple[str, ...] = ("node", "device", "port")


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric family: name (without a ``_total`` suffix for counters), type, labels."""

    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...]
    #: Which part of the agent produces it: ``gpu``, ``workload``, ``infiniband`` or ``agent``.
    source: str

    @property
    def sample_name(self) -> str:
        """The name series carry in the exposition (counters gain ``_total``)."""
        return f"{self.name}_total" if self.type == "counter" else self.name


def _g(name: str, help_: str, labels: tuple[str, ...], source: str) -> MetricSpec:
    return MetricSpec(name, "gauge", help_, labels, source)


def _c(name: str, help_: str, labels: tuple[str, ...], source: str) -> MetricSpec:
    return MetricSpec(name, "counter", help_, labels, source)


_GPU_INFO_LABELS = (
    *GPU_LABELS,
    "model",
    "driver_version",
    "pci_bus_id",
    "mig_mode",
    "mig_profile",
    "parent_uuid",
)

AGENT_METRICS: tuple[MetricSpec, ...] = (
    # GPU
    _g("gpuscope_gpu_info", "GPU identity; always 1.", _GPU_INFO_LABELS, "gpu"),
    _g(
        "gpuscope_gpu_up",
        "1 if the GPU answered this scrape, 0 if it is lost or failing.",
        GPU_LABELS,
        "gpu",
    ),
    _g(
        "gpuscope_gpu_utilization_ratio",
        "Share of time a kernel ran on the GPU (NVML utilization.gpu / 100).",
        GPU_LABELS,
        "gpu",
    ),
    _g(
        "gpuscope_gpu_memory_utilization_ratio",
        "Share of time device memory was read or written.",
        GPU_LABELS,
        "gpu",
    ),
    _g("gpuscope_gpu_memory_used_bytes", "Device memory in use.", GPU_LABELS, "gpu"),
    _g("gpuscope_gpu_memory_total_bytes", "Device memory in all.", GPU_LABELS, "gpu"),
    _g("gpuscope_gpu_power_watts", "Power draw.", GPU_LABELS, "gpu"),
    _g("gpuscope_gpu_temperature_celsius", "Core temperature.", GPU_LABELS, "gpu"),
    _c("gpuscope_gpu_energy_joules", "Energy consumed since the driver loaded.", GPU_LABELS, "gpu"),
    _g("gpuscope_gpu_sm_clock_hertz", "SM clock.", GPU_LABELS, "gpu"),
    _g("gpuscope_gpu_memory_clock_hertz", "Memory clock.", GPU_LABELS, "gpu"),
    _g(
        "gpuscope_gpu_sm_active_ratio",
        "DCGM profiling: share of time at least one warp was active on an SM.",
        GPU_LABELS,
        "gpu",
    ),
    _g(
        "gpuscope_gpu_tensor_active_ratio",
        "DCGM profiling: share of cycles the tensor pipes were active.",
        GPU_LABELS,
        "gpu",
    ),
    _g(
        "gpuscope_gpu_dram_active_ratio",
        "DCGM profiling: share of cycles device memory was busy.",
        GPU_LABELS,
        "gpu",
    ),
    _c(
        "gpuscope_gpu_ecc_errors",
        "ECC errors since the driver loaded, by type.",
        (*GPU_LABELS, "type"),
        "gpu",
    ),
    _c(
        "gpuscope_gpu_nvlink_bytes",
        "NVLink data bytes, by direction.",
        (*GPU_LABELS, "direction"),
        "gpu",
    ),
    _c("gpuscope_gpu_pcie_bytes", "PCIe bytes, by direction.", (*GPU_LABELS, "direction"), "gpu"),
    # Workload attribution
    _g(
        "gpuscope_gpu_workload_info",
        "Which container uses which GPU; always 1.",
        (*WORKLOAD_LABELS, "workload_kind", "interactive", "project"),
        "workload",
    ),
    _g(
        "gpuscope_gpu_workload_memory_used_bytes",
        "GPU memory used by a container's processes on a GPU.",
        WORKLOAD_LABELS,
        "workload",
    ),
    _g(
        "gpuscope_gpu_workload_utilization_ratio",
        "SM utilization of a container's processes on a GPU, from per-process samples.",
        WORKLOAD_LABELS,
        "workload",
    ),
    # InfiniBand
    _g(
        "gpuscope_ib_port_info",
        "InfiniBand port identity and state; always 1.",
        (*IB_LABELS, "link_layer", "state", "phys_state"),
        "infiniband",
    ),
    _c("gpuscope_ib_transmit_bytes", "Bytes transmitted.", IB_LABELS, "infiniband"),
    _c("gpuscope_ib_receive_bytes", "Bytes received.", IB_LABELS, "infiniband"),
    _c("gpuscope_ib_transmit_packets", "Packets transmitted.", IB_LABELS, "infiniband"),
    _c("gpuscope_ib_receive_packets", "Packets received.", IB_LABELS, "infiniband"),
    _c(
        "gpuscope_ib_transmit_wait",
        "Ticks the port had data to send but no flow-control credits (congestion).",
        IB_LABELS,
        "infiniband",
    ),
    _c("gpuscope_ib_errors", "Port error counters, by type.", (*IB_LABELS, "type"), "infiniband"),
    _c(
        "gpuscope_ib_hw_events",
        "Device-specific hardware counters (hw_counters/).",
        (*IB_LABELS, "counter"),
        "infiniband",
    ),
    _g("gpuscope_ib_port_rate_bytes_per_second", "Link rate.", IB_LABELS, "infiniband"),
    _g("gpuscope_ib_port_up", "1 if the port state is ACTIVE.", IB_LABELS, "infiniband"),
    _g(
        "gpuscope_ib_port_data_saturated",
        "1 if a 32-bit data counter is stuck at its maximum (no 64-bit counter on the device).",
        IB_LABELS,
        "infiniband",
    ),
    _g(
        "gpuscope_ib_port_unreadable_files",
        "Files of the port that gave no value this scrape, by reason (unreadable: an error "
        "on open or read; stuck: a read of the port that has not returned).",
        (*IB_LABELS, "reason"),
        "infiniband",
    ),
    # Agent health
    _g(
        "gpuscope_agent_source_up",
        "1 if the source gave readings this scrape.",
        ("node", "source"),
        "agent",
    ),
    _g(
        "gpuscope_agent_collect_seconds",
        "Time the source took this scrape.",
        ("node", "source"),
        "agent",
    ),
    _c(
        "gpuscope_agent_errors",
        "Devices, readings and values skipped as unusable (never failing the page), by reason.",
        ("node", "source", "reason"),
        "agent",
    ),
    _g(
        "gpuscope_agent_info",
        "Agent identity; always 1.",
        ("node", "version", "gpu_source"),
        "agent",
    ),
)

AGENT_METRICS_BY_NAME: dict[str, MetricSpec] = {m.name: m for m in AGENT_METRICS}


def agent_sample_names() -> frozenset[str]:
    """Every series name the agent can put in an exposition (counters with ``_total``)."""
    return frozenset(m.sample_name for m in AGENT_METRICS)


def spec(name: str) -> MetricSpec:
    """The spec of a family by name; a ``KeyError`` names a metric that is not catalogued."""
    return AGENT_METRICS_BY_NAME[name]


def render_markdown() -> str:
    """The catalogue as the Markdown table in docs/metrics.md (kept current by a test)."""
    lines = [
        "# Metric catalogue (agent)",
        "",
        "This table is generated from `gpuscope/core/catalogue.py` by "
        "`python -m gpuscope.core.catalogue`",
        "(a test fails when they disagree); the sections after it, the collector's gauges,",
        "renamed metrics and the mapping from dcgm-exporter and node_exporter, are written by",
        "hand. Every GPU series carries `node`, `gpu`",
        "(index of the physical GPU), `uuid` and `mig_instance` (empty for a whole GPU; the GPU",
        "instance id for a MIG device, whose `uuid` is the MIG device's). A value the device",
        "does not support is absent, never 0.",
        "",
        "| metric | type | labels | source | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for m in AGENT_METRICS:
        labels = ", ".join(f"`{lbl}`" for lbl in m.labels)
        lines.append(f"| `{m.sample_name}` | {m.type} | {labels} | {m.source} | {m.help} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_markdown(), end="")
