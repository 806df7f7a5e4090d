"""DCGM field table and the pure translation of DCGM values into :class:`GpuReading`.

Two parts of gpuscope read DCGM: the agent (through DCGM's Python bindings or a local
dcgm-exporter page) and, later, the collector (from dcgm-exporter pages it is pointed at).
Both need the same field ids, the same units and the same idea of a *blank* value, so they
live here, in the shared package, with no import beyond the standard library and
:mod:`gpuscope.core.records` (no prometheus_client: callers parse pages themselves and hand over
plain ``(name, labels, value)`` series).

Units. DCGM reports memory in MiB, clocks in MHz, energy in mJ and NVML-style utilization
in percent; readings carry base units (bytes, Hz, J, 0..1 ratios). The profiling ratios
(``DCGM_FI_PROF_*_ACTIVE``) are already 0..1, whatever dcgm-exporter's help text says.

Blank values. DCGM never sends "no value" as a gap: it sends sentinels, int64 from
``0x7ffffffffffffff0`` upward and doubles from ``2**47`` upward (blank, not found, not
supported, no permission), and strings like ``<<<NULL>>>``. dcgm-exporter passes them
through (``9223372036854775794`` is an int64 "not supported"). A sentinel becomes ``None``,
never a number and never zero.

What is deliberately *not* mapped. ``DCGM_FI_PROF_PCIE_*_BYTES`` and
``DCGM_FI_PROF_NVLINK_*_BYTES`` are bytes-per-second rates averaged over DCGM's sampling
interval, not cumulative counters: putting them into ``*_bytes_total`` would make
``rate()`` meaningless and integrating them between scrapes would invent bytes. The
deprecated ``DCGM_FI_DEV_PCIE_*_THROUGHPUT`` are KB/s rates too.
``DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`` is a counter but sums both directions, so it fits
neither ``nvlink_tx`` nor ``nvlink_rx``. Those ``*_total`` fields stay ``None`` here; the
NVML source fills them from real counters where the driver has them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from gpuscope.core.records import GpuReading, PodRef

log = logging.getLogger(__name__)

#: Lowest int64 sentinel (DCGM_INT64_BLANK); +1 not found, +2 not supported, +3 no permission.
INT64_BLANK: Final = 0x7FFFFFFFFFFFFFF0
#: Lowest double sentinel (DCGM_FP64_BLANK = 2**47), same offsets as the int64 ones.
FP64_BLANK: Final = 140737488355328.0
#: int64 sentinels survive a trip through a float (a Prometheus page) only as 2**63.
_INT64_BLANK_AS_FLOAT: Final = float(INT64_BLANK)
MIB: Final = 1 << 20

ValueType = Literal["int64", "double", "string"]
ExporterType = Literal["gauge", "counter", "label"]
#: ``identity``: names the GPU; ``metric``: fills ``attribute`` scaled by ``scale``;
#: ``memory_part``: summed into the memory total when FB_TOTAL is absent;
#: ``unmapped``: known, read by nobody on purpose (``why`` says why).
Role = Literal["identity", "metric", "memory_part", "unmapped"]


@dataclass(frozen=True, slots=True)
class DcgmField:
    """One DCGM field: id, DCGM value type, dcgm-exporter type, and where it goes."""

    name: str
    field_id: int
    value_type: ValueType
    exporter_type: ExporterType
    role: Role
    #: The :class:`GpuReading` attribute it fills (``None`` for unmapped fields).
    attribute: str | None = None
    #: Multiply the DCGM value by this to get the attribute's base unit.
    scale: float = 1.0
    why: str = ""


_F = DcgmField
_RATE = "bytes/s rate over DCGM's sampling interval, not a counter"
_KBS = "deprecated; KB/s rate, not a counter"

#: Field ids checked against NVIDIA/DCGM testing/python3/dcgm_fields.py; value types against
#: DcgmFields.cpp; exporter types against dcgm-exporter's etc/*.csv.
# fmt: off
FIELDS: Final[tuple[DcgmField, ...]] = (
    _F("DCGM_FI_DRIVER_VERSION", 1, "string", "label", "identity", "driver_version"),
    _F("DCGM_FI_DEV_NAME", 50, "string", "label", "identity", "model"),
    _F("DCGM_FI_DEV_NVML_INDEX", 52, "int64", "gauge", "identity", "index"),
    _F("DCGM_FI_DEV_UUID", 54, "string", "label", "identity", "uuid"),
    _F("DCGM_FI_DEV_PCI_BUSID", 57, "string", "label", "identity", "pci_bus_id"),
    _F("DCGM_FI_DEV_SM_CLOCK", 100, "int64", "gauge", "metric", "sm_clock_hz", 1e6),
    _F("DCGM_FI_DEV_MEM_CLOCK", 101, "int64", "gauge", "metric", "memory_clock_hz", 1e6),
    _F("DCGM_FI_DEV_GPU_TEMP", 150, "int64", "gauge", "metric", "temperature_celsius"),
    _F("DCGM_FI_DEV_POWER_USAGE", 155, "double", "gauge", "metric", "power_watts"),
    _F("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 156, "int64", "counter", "metric",
       "energy_joules_total", 1e-3),
    _F("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", 200, "int64", "gauge", "unmapped", why=_KBS),
    _F("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", 201, "int64", "gauge", "unmapped", why=_KBS),
    _F("DCGM_FI_DEV_GPU_UTIL", 203, "int64", "gauge", "metric", "utilization_ratio", 0.01),
    _F("DCGM_FI_DEV_MEM_COPY_UTIL", 204, "int64", "gauge", "metric",
       "memory_utilization_ratio", 0.01),
    _F("DCGM_FI_DEV_FB_TOTAL", 250, "int64", "gauge", "metric", "memory_total_bytes", MIB),
    _F("DCGM_FI_DEV_FB_FREE", 251, "int64", "gauge", "memory_part", "memory_total_bytes", MIB),
    _F("DCGM_FI_DEV_FB_USED", 252, "int64", "gauge", "metric", "memory_used_bytes", MIB),
    _F("DCGM_FI_DEV_FB_RESERVED", 253, "int64", "gauge", "memory_part", "memory_total_bytes",
       MIB),
    _F("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 310, "int64", "counter", "metric",
       "ecc_corrected_total"),
    _F("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 311, "int64", "counter", "metric",
       "ecc_uncorrected_total"),
    _F("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 449, "int64", "counter", "unmapped",
       why="tx and rx summed: no direction to report it under"),
    _F("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1001, "double", "gauge", "unmapped",
       why="no reading field for it; SM active is the sharper measure"),
    _F("DCGM_FI_PROF_SM_ACTIVE", 1002, "double", "gauge", "metric", "sm_active_ratio"),
    _F("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1004, "double", "gauge", "metric",
       "tensor_active_ratio"),
    _F("DCGM_FI_PROF_DRAM_ACTIVE", 1005, "double", "gauge", "metric", "dram_active_ratio"),
    _F("DCGM_FI_PROF_PCIE_TX_BYTES", 1009, "int64", "gauge", "unmapped", why=_RATE),
    _F("DCGM_FI_PROF_PCIE_RX_BYTES", 1010, "int64", "gauge", "unmapped", why=_RATE),
    _F("DCGM_FI_PROF_NVLINK_TX_BYTES", 1011, "int64", "gauge", "unmapped", why=_RATE),
    _F("DCGM_FI_PROF_NVLINK_RX_BYTES", 1012, "int64", "gauge", "unmapped", why=_RATE),
)
# fmt: on
FIELDS_BY_ID: Final[Mapping[int, DcgmField]] = {f.field_id: f for f in FIELDS}
FIELDS_BY_NAME: Final[Mapping[str, DcgmField]] = {f.name: f for f in FIELDS}

FB_TOTAL, FB_FREE, FB_USED, FB_RESERVED = 250, 251, 252, 253
_INT_ATTRIBUTES: Final = frozenset(
    {"memory_used_bytes", "memory_total_bytes", "ecc_corrected_total", "ecc_uncorrected_total"}
)

#: One dcgm-exporter series: metric name, its labels, its value.
Series = tuple[str, Mapping[str, str], float]


def is_blank(value: object, value_type: ValueType | None = None) -> bool:
    """Whether ``value`` is DCGM's "no value" (a blank/not-found/unsupported sentinel).

    ``value_type`` is the field's DCGM type; give it for values that went through a float
    (a Prometheus page), where an int64 sentinel arrives as ``9.223372036854775808e18`` and a
    real int64 counter may legitimately exceed the double sentinel ``2**47``.
    """
    if value is None:
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= INT64_BLANK
    if isinstance(value, float):
        if math.isnan(value):
            return True
        if value_type == "int64":
            return value >= _INT64_BLANK_AS_FLOAT
        return value >= FP64_BLANK
    if isinstance(value, str):
        return value.startswith("<<<") and ">>>" in value
    return False


def _number(value: object, value_type: ValueType) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if is_blank(value, value_type):
        return None
    return float(value)


def _scaled(f: DcgmField, raw: float) -> float | int:
    value = raw * f.scale
    return round(value) if f.attribute in _INT_ATTRIBUTES else value


def field_values_to_attributes(values: Mapping[int, object]) -> dict[str, Any]:
    """Map ``{field_id: raw DCGM value}`` to :class:`GpuReading` metric attributes.

    Only metric fields are returned, in base units; blank or absent fields are left out
    (so ``dataclasses.replace`` with the result never overwrites a value with ``None``).
    The memory total comes from FB_TOTAL, else from FB_USED + FB_FREE (+ FB_RESERVED).
    """
    out: dict[str, Any] = {}
    for field_id, raw in values.items():
        f = FIELDS_BY_ID.get(field_id)
        if f is None or f.role != "metric" or f.attribute is None:
            continue
        number = _number(raw, f.value_type)
        if number is not None:
            out[f.attribute] = _scaled(f, number)
    if "memory_total_bytes" not in out:
        used = _number(values.get(FB_USED), "int64")
        free = _number(values.get(FB_FREE), "int64")
        reserved = _number(values.get(FB_RESERVED), "int64")
        if used is not None and free is not None:
            out["memory_total_bytes"] = round((used + free + (reserved or 0.0)) * MIB)
    return out


def field_for_series_name(name: str) -> DcgmField | None:
    """The field a dcgm-exporter series name stands for, or ``None``.

    Parsers that follow OpenMetrics (prometheus_client >= 0.2x) append ``_total`` to the
    samples of a family typed ``counter``, so ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` may
    arrive as ``..._total``; both spellings are accepted.
    """
    f = FIELDS_BY_NAME.get(name)
    if f is None and name.endswith("_total"):
        f = FIELDS_BY_NAME.get(name.removesuffix("_total"))
    return f


def _first(labels: Mapping[str, str], *names: str) -> str:
    for name in names:
        value = labels.get(name, "")
        if value and not is_blank(value):
            return value
    return ""


@dataclass
class _Gpu:
    index: int
    uuid: str
    mig_instance: str
    model: str = ""
    driver_version: str = ""
    pci_bus_id: str = ""
    mig_profile: str = ""
    values: dict[int, object] = field(default_factory=dict)
    pods: dict[PodRef, None] = field(default_factory=dict)

    def absorb(self, labels: Mapping[str, str]) -> None:
        self.model = self.model or _first(labels, "modelName", "DCGM_FI_DEV_NAME")
        self.driver_version = self.driver_version or _first(labels, "DCGM_FI_DRIVER_VERSION")
        self.pci_bus_id = self.pci_bus_id or _first(labels, "pci_bus_id", "DCGM_FI_DEV_PCI_BUSID")
        self.mig_profile = self.mig_profile or _first(labels, "GPU_I_PROFILE")
        # Current label names first, then those of dcgm-exporter's old namespace option.
        namespace = _first(labels, "namespace", "pod_namespace")
        pod = _first(labels, "pod", "pod_name")
        if namespace and pod:
            self.pods[PodRef(namespace, pod, _first(labels, "container", "container_name"))] = None


def readings_from_dcgm_exporter(
    series: Iterable[Series], node: str | None = None
) -> list[GpuReading]:
    """Translate dcgm-exporter series into one :class:`GpuReading` per (UUID, GPU_I_ID).

    Series without ``gpu``/``UUID`` labels belong to no GPU and are skipped (DEBUG log);
    metrics not in :data:`FIELDS` are ignored. With ``node``, series whose ``Hostname``
    names another host are skipped too (a federated page may hold several).

    dcgm-exporter labels a MIG instance with its parent's UUID plus ``GPU_I_ID``; it does
    not expose the MIG device UUID. Such a reading has ``uuid == parent_uuid`` (the parent)
    and ``mig_instance`` set, which keeps the ``(uuid, mig_instance)`` series labels unique.
    """
    gpus: dict[tuple[str, str], _Gpu] = {}
    other_host = 0
    for name, labels, value in series:
        uuid = _first(labels, "UUID", "uuid")
        gpu_label = labels.get("gpu", "")
        if not uuid or not gpu_label:
            log.debug("dcgm-exporter series %s has no gpu/UUID labels; skipped", name)
            continue
        try:
            index = int(gpu_label)
        except ValueError:
            log.debug("dcgm-exporter series %s has gpu=%r, not an index; skipped", name, gpu_label)
            continue
        host = labels.get("Hostname", "")
        if node is not None and host and host != node:
            other_host += 1
            log.debug("dcgm-exporter series %s is from host %r, not %r; skipped", name, host, node)
            continue
        mig = _first(labels, "GPU_I_ID")
        gpu = gpus.get((uuid, mig))
        if gpu is None:
            gpu = gpus[(uuid, mig)] = _Gpu(index=index, uuid=uuid, mig_instance=mig)
        gpu.absorb(labels)
        f = field_for_series_name(name)
        if f is not None and f.value_type != "string":
            gpu.values[f.field_id] = value
    if other_host and not gpus:
        log.warning(
            "dcgm-exporter page: all %d GPU series are from hosts other than %r", other_host, node
        )
    with_mig = {uuid for uuid, mig in gpus if mig}
    readings = []
    for gpu in gpus.values():
        mig_mode = "enabled" if gpu.uuid in with_mig else "unsupported"
        readings.append(
            GpuReading(
                index=gpu.index,
                uuid=gpu.uuid,
                model=gpu.model,
                driver_version=gpu.driver_version,
                pci_bus_id=gpu.pci_bus_id,
                mig_mode=mig_mode,
                mig_instance=gpu.mig_instance,
                mig_profile=gpu.mig_profile,
                parent_uuid=gpu.uuid if gpu.mig_instance else "",
                pods=tuple(gpu.pods),
                **field_values_to_attributes(gpu.values),
            )
        )
    return readings
