"""Readings to catalogue series: the one mapping from records to metric names and labels.

The agent's exposition and the collector's ingest of dcgm-exporter pages both use it, so a
GPU read through NVML on a node and one read from a dcgm-exporter page by the collector end
up as the same series. Each item is ``(family name, label values in the spec's label
order, value)``; ``None`` fields yield nothing (absent, never 0).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from gpuscope.core.records import GpuReading, GpuWorkload, IbPortReading

Series = tuple[str, list[str], float]

#: (family, GpuReading attribute) for the plain per-GPU series.
GPU_VALUES: tuple[tuple[str, str], ...] = (
    ("gpuscope_gpu_utilization_ratio", "utilization_ratio"),
    ("gpuscope_gpu_memory_utilization_ratio", "memory_utilization_ratio"),
    ("gpuscope_gpu_memory_used_bytes", "memory_used_bytes"),
    ("gpuscope_gpu_memory_total_bytes", "memory_total_bytes"),
    ("gpuscope_gpu_power_watts", "power_watts"),
    ("gpuscope_gpu_temperature_celsius", "temperature_celsius"),
    ("gpuscope_gpu_energy_joules", "energy_joules_total"),
    ("gpuscope_gpu_sm_clock_hertz", "sm_clock_hz"),
    ("gpuscope_gpu_memory_clock_hertz", "memory_clock_hz"),
    ("gpuscope_gpu_sm_active_ratio", "sm_active_ratio"),
    ("gpuscope_gpu_tensor_active_ratio", "tensor_active_ratio"),
    ("gpuscope_gpu_dram_active_ratio", "dram_active_ratio"),
)
#: (family, extra label value, attribute) for per-GPU series with one more label.
GPU_LABELLED: tuple[tuple[str, str, str], ...] = (
    ("gpuscope_gpu_ecc_errors", "corrected", "ecc_corrected_total"),
    ("gpuscope_gpu_ecc_errors", "uncorrected", "ecc_uncorrected_total"),
    ("gpuscope_gpu_nvlink_bytes", "tx", "nvlink_tx_bytes_total"),
    ("gpuscope_gpu_nvlink_bytes", "rx", "nvlink_rx_bytes_total"),
    ("gpuscope_gpu_pcie_bytes", "tx", "pcie_tx_bytes_total"),
    ("gpuscope_gpu_pcie_bytes", "rx", "pcie_rx_bytes_total"),
)
IB_VALUES: tuple[tuple[str, str], ...] = (
    ("gpuscope_ib_transmit_bytes", "transmit_bytes_total"),
    ("gpuscope_ib_receive_bytes", "receive_bytes_total"),
    ("gpuscope_ib_transmit_packets", "transmit_packets_total"),
    ("gpuscope_ib_receive_packets", "receive_packets_total"),
    ("gpuscope_ib_transmit_wait", "transmit_wait_total"),
    ("gpuscope_ib_port_rate_bytes_per_second", "rate_bytes_per_second"),
)


def gpu_series(node: str, g: GpuReading) -> Iterator[Series]:
    labels = [node, str(g.index), g.uuid, g.mig_instance]
    info = [*labels, g.model, g.driver_version, g.pci_bus_id, g.mig_mode, g.mig_profile]
    yield "gpuscope_gpu_info", [*info, g.parent_uuid], 1.0
    yield "gpuscope_gpu_up", labels, 1.0 if g.up else 0.0
    if not g.up:
        return
    for name, attr in GPU_VALUES:
        value = getattr(g, attr)
        if value is not None:
            yield name, labels, float(value)
    for name, label, attr in GPU_LABELLED:
        value = getattr(g, attr)
        if value is not None:
            yield name, [*labels, label], float(value)


def workload_series(
    node: str, w: GpuWorkload, gpus_by_uuid: dict[str, GpuReading]
) -> Iterator[Series]:
    """A container's use of a GPU; nothing if that GPU is not among this scrape's readings."""
    gpu = gpus_by_uuid.get(w.gpu_uuid)
    if gpu is None:
        return
    labels = [node, str(gpu.index), gpu.uuid, gpu.mig_instance, w.namespace, w.pod, w.container]
    interactive = "true" if w.interactive else "false"
    yield (
        "gpuscope_gpu_workload_info",
        [*labels, w.workload_kind.value, interactive, w.project],
        1.0,
    )
    if w.memory_used_bytes is not None:
        yield "gpuscope_gpu_workload_memory_used_bytes", labels, float(w.memory_used_bytes)
    if w.utilization_ratio is not None:
        yield "gpuscope_gpu_workload_utilization_ratio", labels, w.utilization_ratio


def port_series(node: str, p: IbPortReading) -> Iterator[Series]:
    labels = [node, p.device, p.port]
    for reason, count in p.unreadable:
        yield "gpuscope_ib_port_unreadable_files", [*labels, reason], float(count)
    if p.stuck:  # nothing was read: no state, no counters (never zeros)
        return
    yield "gpuscope_ib_port_info", [*labels, p.link_layer, p.state, p.phys_state], 1.0
    for name, attr in IB_VALUES:
        value = getattr(p, attr)
        if value is not None:
            yield name, labels, float(value)
    if p.up is not None:
        yield "gpuscope_ib_port_up", labels, 1.0 if p.up else 0.0
    yield "gpuscope_ib_port_data_saturated", labels, 1.0 if p.data_counter_saturated else 0.0
    for kind, value in p.errors:
        yield "gpuscope_ib_errors", [*labels, kind], float(value)
    for counter, value in p.hw_counters:
        yield "gpuscope_ib_hw_events", [*labels, counter], float(value)


def node_series(
    node: str,
    gpus: Sequence[GpuReading],
    workloads: Sequence[GpuWorkload] = (),
    ports: Sequence[IbPortReading] = (),
) -> Iterator[Series]:
    """Every catalogue series a node's readings give."""
    for g in gpus:
        yield from gpu_series(node, g)
    by_uuid = {g.uuid: g for g in gpus}
    for w in workloads:
        yield from workload_series(node, w, by_uuid)
    for p in ports:
        yield from port_series(node, p)
