"""A stand-in for the ``pynvml`` module: same function names, arguments and return shapes.

Tests replace NVML at the library boundary with this double (docs/design.md, "Real components").
It returns pynvml's own ctypes structures (``c_nvmlMemory_t``, ``c_nvmlFieldValue_t``,
``c_nvmlProcessUtilizationSample_t``...) and raises pynvml's own exception classes
(``NVMLError_NotSupported``, ``NVMLError_GpuIsLost``...), and its constants are pynvml's.

Devices come from real ``nvidia-smi -q -x`` dumps (:meth:`FakeNvml.from_nvidia_smi_xml`) or
are built in code. A value that is ``None`` on a :class:`FakeDevice` makes the matching call
raise ``NVMLError_NotSupported``, as a dump's ``N/A`` means the driver could not give it.

What a dump does not hold stays unsupported unless a test sets it: energy, NVLink and PCIe
byte counters. MIG devices in a v12 dump have no UUID; one is derived from the parent's UUID
and the GPU-instance id (``MIG-<uuid5>``) so readings can be told apart.
"""

from __future__ import annotations

import uuid as uuidlib
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml

from tests.paths import FIXTURES

NVIDIA_SMI_XML = FIXTURES / "nvidia-smi-xml"

_MIB = 1024 * 1024
_ALL_LINKS = 0xFFFFFFFF
_NO_INSTANCE = 0xFFFFFFFF
_UNAVAILABLE = {"n/a", "[n/a]", "not supported", "[not supported]", "unknown error", ""}
_UNAVAILABLE_PREFIX = ("requested functionality has been deprecated", "insufficient permissions")


@dataclass
class FakeProcess:
    """A process as ``nvidia-smi`` lists it; ``kind`` is ``C``, ``G`` or ``C+G``."""

    pid: int
    used_memory_bytes: int | None = None
    kind: str = "C"


@dataclass
class FakeSample:
    """One per-process utilization sample; ``timestamp`` in microseconds, utils in percent."""

    pid: int
    timestamp: int
    sm_util: int
    mem_util: int = 0


@dataclass
class FakeDevice:
    """One GPU or MIG device. ``None`` means the driver does not support that value."""

    uuid: str
    name: str
    pci_bus_id: str = ""
    gpu_util: int | None = None
    memory_util: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_mw: int | None = None
    temperature_c: int | None = None
    energy_mj: int | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    #: Volatile ECC totals (corrected, uncorrected); aggregate ones separately.
    ecc_volatile: tuple[int, int] | None = None
    ecc_aggregate: tuple[int, int] | None = None
    #: (current, pending); ``None``: the GPU cannot do MIG.
    mig_mode: tuple[int, int] | None = None
    #: Per-link NVLink data counters in KiB.
    nvlink_tx_kib: list[int] | None = None
    nvlink_rx_kib: list[int] | None = None
    #: Whether the driver accepts ``scopeId=UINT_MAX`` (sum over links).
    nvlink_aggregate_scope: bool = True
    pcie_tx_bytes: int | None = None
    pcie_rx_bytes: int | None = None
    #: Instantaneous PCIe throughput in KB/s, as ``nvmlDeviceGetPcieThroughput`` gives it.
    pcie_tx_kbps: int | None = None
    pcie_rx_kbps: int | None = None
    processes: list[FakeProcess] = field(default_factory=list)
    samples: list[FakeSample] = field(default_factory=list)
    process_utilization_supported: bool = True
    lost: bool = False
    #: For a MIG device: its GPU-instance id and parent.
    gpu_instance_id: int | None = None
    parent: FakeDevice | None = field(default=None, repr=False)
    #: For a MIG-enabled GPU: MIG device slots, ``None`` for an empty slot.
    mig_slots: list[FakeDevice | None] = field(default_factory=list)

    @property
    def is_lost(self) -> bool:
        return self.lost or (self.parent is not None and self.parent.lost)


@dataclass(frozen=True)
class FakeHandle:
    """An opaque device handle, like pynvml's ``c_nvmlDevice_t``."""

    device: FakeDevice = field(repr=False)


class FakeNvml:
    """The functions of ``pynvml`` that :class:`gpuscope.agent.devices.nvml.NvmlSource` calls, on fake devices."""

    # pynvml's own exception classes and constants, so code under test can use either module.
    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_NoPermission = pynvml.NVMLError_NoPermission
    NVMLError_NotFound = pynvml.NVMLError_NotFound
    NVMLError_GpuIsLost = pynvml.NVMLError_GpuIsLost
    NVMLError_ResetRequired = pynvml.NVMLError_ResetRequired
    NVMLError_Uninitialized = pynvml.NVMLError_Uninitialized
    NVMLError_DriverNotLoaded = pynvml.NVMLError_DriverNotLoaded
    NVMLError_LibraryNotFound = pynvml.NVMLError_LibraryNotFound
    NVMLError_LibRmVersionMismatch = pynvml.NVMLError_LibRmVersionMismatch
    NVMLError_InvalidArgument = pynvml.NVMLError_InvalidArgument
    NVMLLibraryMismatchError = pynvml.NVMLLibraryMismatchError
    NVML_SUCCESS = pynvml.NVML_SUCCESS
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_MEMORY_ERROR_TYPE_CORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC
    NVML_AGGREGATE_ECC = pynvml.NVML_AGGREGATE_ECC
    NVML_DEVICE_MIG_DISABLE = pynvml.NVML_DEVICE_MIG_DISABLE
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
    NVML_FI_DEV_PCIE_COUNT_TX_BYTES = pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES
    NVML_FI_DEV_PCIE_COUNT_RX_BYTES = pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_PCIE_UTIL_TX_BYTES = pynvml.NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES = pynvml.NVML_PCIE_UTIL_RX_BYTES
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG

    def __init__(self, driver_version: str = "550.54.15") -> None:
        self.driver_version = driver_version
        self.devices: list[FakeDevice] = []
        #: ``False`` simulates a node without the driver: nvmlInit raises DriverNotLoaded.
        self.driver_loaded = True
        #: When set, ``nvmlDeviceGetCount`` raises it (after a successful init).
        self.count_error: pynvml.NVMLError | None = None
        #: ``(device uuid, lastSeenTimeStamp)`` of every nvmlDeviceGetProcessUtilization call.
        self.process_utilization_calls: list[tuple[str, int]] = []
        self._refcount = 0
        self.shutdowns = 0

    # -- building ------------------------------------------------------------------------

    @classmethod
    def from_nvidia_smi_xml(cls, *paths: Path | str) -> FakeNvml:
        """One fake node holding the GPUs of these dumps, in order (driver from the first)."""
        fake: FakeNvml | None = None
        for path in paths:
            root = ET.parse(path).getroot()
            if fake is None:
                fake = cls(driver_version=_text(root, "driver_version") or "")
            for gpu in root.findall("gpu"):
                fake._add_from_xml(gpu)
        if fake is None:
            raise ValueError("from_nvidia_smi_xml needs at least one path")
        return fake

    def add_device(
        self, uuid: str, name: str = "NVIDIA H100 80GB HBM3", **values: Any
    ) -> FakeDevice:
        device = FakeDevice(uuid=uuid, name=name, **values)
        self.devices.append(device)
        return device

    def add_process(
        self, device: FakeDevice, pid: int, used_memory_bytes: int | None, kind: str = "C"
    ) -> FakeProcess:
        process = FakeProcess(pid, used_memory_bytes, kind)
        device.processes.append(process)
        return process

    def add_sample(
        self, device: FakeDevice, pid: int, timestamp: int, sm_util: int, mem_util: int = 0
    ) -> None:
        device.samples.append(FakeSample(pid, timestamp, sm_util, mem_util))

    def add_mig_device(
        self,
        parent: FakeDevice,
        uuid: str,
        gpu_instance_id: int,
        profile: str = "",
        *,
        slot: int | None = None,
        max_slots: int = 7,
        **values: Any,
    ) -> FakeDevice:
        """A MIG device in ``parent`` (which gets MIG mode enabled); named like NVML names it."""
        parent.mig_mode = (pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE)
        parent.gpu_util = parent.memory_util = None  # NVML refuses these under MIG
        name = f"{parent.name} MIG {profile}".rstrip()
        mig = FakeDevice(
            uuid=uuid, name=name, gpu_instance_id=gpu_instance_id, parent=parent, **values
        )
        while len(parent.mig_slots) < max_slots:
            parent.mig_slots.append(None)
        index = slot if slot is not None else parent.mig_slots.index(None)
        parent.mig_slots[index] = mig
        return mig

    def mark_lost(self, device: FakeDevice | int, lost: bool = True) -> None:
        """From now on every call on this GPU (and its MIG devices) raises GpuIsLost."""
        target = self.devices[device] if isinstance(device, int) else device
        target.lost = lost

    def _add_from_xml(self, gpu: ET.Element) -> None:
        mig_current = _text(gpu, "mig_mode/current_mig")
        mig_pending = _text(gpu, "mig_mode/pending_mig")
        device = self.add_device(
            uuid=_text(gpu, "uuid") or "",
            name=_text(gpu, "product_name") or "",
            pci_bus_id=_text(gpu, "pci/pci_bus_id") or gpu.get("id", ""),
            gpu_util=_int(gpu, "utilization/gpu_util", "%"),
            memory_util=_int(gpu, "utilization/memory_util", "%"),
            memory_used_bytes=_mib(gpu, "fb_memory_usage/used"),
            memory_total_bytes=_mib(gpu, "fb_memory_usage/total"),
            power_mw=_power_mw(gpu),
            temperature_c=_int(gpu, "temperature/gpu_temp", "C"),
            sm_clock_mhz=_int(gpu, "clocks/sm_clock", "MHz"),
            mem_clock_mhz=_int(gpu, "clocks/mem_clock", "MHz"),
            ecc_volatile=_ecc(gpu, "volatile"),
            ecc_aggregate=_ecc(gpu, "aggregate"),
            mig_mode=(
                (_mig(mig_current), _mig(mig_pending))
                if mig_current is not None and mig_pending is not None
                else None
            ),
            pcie_tx_kbps=_int(gpu, "pci/tx_util", "KB/s"),
            pcie_rx_kbps=_int(gpu, "pci/rx_util", "KB/s"),
        )
        by_instance: dict[int, FakeDevice] = {}
        for mig in gpu.findall("mig_devices/mig_device"):
            instance = _int(mig, "gpu_instance_id", "")
            compute = _int(mig, "compute_instance_id", "")
            if instance is None:
                continue
            name = f"{device.uuid}/gi{instance}/ci{compute}"
            mig_uuid = _text(mig, "uuid") or f"MIG-{uuidlib.uuid5(uuidlib.NAMESPACE_OID, name)}"
            by_instance[instance] = self.add_mig_device(
                device,
                mig_uuid,
                instance,
                slot=_int(mig, "index", ""),
                memory_used_bytes=_mib(mig, "fb_memory_usage/used"),
                memory_total_bytes=_mib(mig, "fb_memory_usage/total"),
            )
        for info in gpu.findall("processes/process_info"):
            pid = _int(info, "pid", "")
            if pid is None:
                continue
            instance = _int(info, "gpu_instance_id", "")
            owner = by_instance.get(instance, device) if instance is not None else device
            kind = _text(info, "type") or "C"
            self.add_process(owner, pid, _mib(info, "used_memory"), kind)

    # -- pynvml functions ----------------------------------------------------------------

    def nvmlInit(self) -> None:
        if not self.driver_loaded:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        self._refcount += 1

    def nvmlShutdown(self) -> None:
        self._check_init()
        self._refcount -= 1
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check_init()
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        if self.count_error is not None:
            raise self.count_error
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._check_init()
        if not 0 <= index < len(self.devices):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        device = self.devices[index]
        if device.is_lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return FakeHandle(device)

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        return self._device(handle).uuid

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return self._device(handle).name

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> pynvml.nvmlPciInfo_t:
        device = self._device(handle)
        info = pynvml.nvmlPciInfo_t()
        info.busId = (device.parent or device).pci_bus_id
        return info

    def nvmlDeviceGetMigMode(self, device: FakeHandle) -> list[int]:
        mode = _supported(self._device(device).mig_mode)
        return [mode[0], mode[1]]

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> Any:
        device = self._device(handle)
        gpu, memory = _supported(device.gpu_util), _supported(device.memory_util)
        return pynvml.c_nvmlUtilization_t(gpu=gpu, memory=memory)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: Any = None) -> Any:
        device = self._device(handle)
        used, total = _supported(device.memory_used_bytes), _supported(device.memory_total_bytes)
        return pynvml.c_nvmlMemory_t(total=total, free=total - used, used=used)

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return _supported(self._device(handle).power_mw)

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        device = self._device(handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _supported(device.temperature_c)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        return _supported(self._device(handle).energy_mj)

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, type: int) -> int:
        device = self._device(handle)
        clocks = {
            pynvml.NVML_CLOCK_SM: device.sm_clock_mhz,
            pynvml.NVML_CLOCK_MEM: device.mem_clock_mhz,
        }
        return _supported(clocks.get(type))

    def nvmlDeviceGetTotalEccErrors(
        self, handle: FakeHandle, errorType: int, counterType: int
    ) -> int:
        device = self._device(handle)
        counts = (
            device.ecc_volatile if counterType == pynvml.NVML_VOLATILE_ECC else device.ecc_aggregate
        )
        corrected, uncorrected = _supported(counts)
        return corrected if errorType == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else uncorrected

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, fieldIds: list[Any]) -> Any:
        device = self._device(handle)
        values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        for i, requested in enumerate(fieldIds):
            field_id, scope = requested if isinstance(requested, tuple) else (requested, 0)
            values[i].fieldId, values[i].scopeId = field_id, scope
            values[i].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            result, value = self._field(device, field_id, scope)
            values[i].nvmlReturn = result
            values[i].value.ullVal = value
        return values

    def nvmlDeviceGetPcieThroughput(self, device: FakeHandle, counter: int) -> int:
        target = self._device(device)
        if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            return _supported(target.pcie_tx_kbps)
        return _supported(target.pcie_rx_kbps)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[Any]:
        return self._processes(self._device(handle), "C")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeHandle) -> list[Any]:
        return self._processes(self._device(handle), "G")

    def nvmlDeviceGetProcessUtilization(self, handle: FakeHandle, timeStamp: int) -> list[Any]:
        device = self._device(handle)
        self.process_utilization_calls.append((device.uuid, timeStamp))
        if not device.process_utilization_supported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        fresh = [s for s in device.samples if s.timestamp > timeStamp]
        if not fresh:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return [
            pynvml.c_nvmlProcessUtilizationSample_t(
                pid=s.pid,
                timeStamp=s.timestamp,
                smUtil=s.sm_util,
                memUtil=s.mem_util,
                encUtil=0,
                decUtil=0,
            )
            for s in fresh
        ]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: FakeHandle) -> int:
        target = self._device(device)
        _supported(target.mig_mode)
        return len(target.mig_slots)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: FakeHandle, index: int) -> FakeHandle:
        target = self._device(device)
        if not 0 <= index < len(target.mig_slots):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        mig = target.mig_slots[index]
        if mig is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return FakeHandle(mig)

    def nvmlDeviceGetGpuInstanceId(self, device: FakeHandle) -> int:
        target = self._device(device)
        if target.gpu_instance_id is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return target.gpu_instance_id

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: FakeHandle) -> FakeHandle:
        parent = self._device(migDevice).parent
        if parent is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(parent)

    # -- internals -----------------------------------------------------------------------

    def _check_init(self) -> None:
        if self._refcount <= 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _device(self, handle: FakeHandle) -> FakeDevice:
        self._check_init()
        if not isinstance(handle, FakeHandle):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if handle.device.is_lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return handle.device

    def _processes(self, device: FakeDevice, kind: str) -> list[Any]:
        instance = device.gpu_instance_id if device.gpu_instance_id is not None else _NO_INSTANCE
        return [
            pynvml.nvmlFriendlyObject(
                {
                    "pid": p.pid,
                    # pynvml turns NVML_VALUE_NOT_AVAILABLE into None itself.
                    "usedGpuMemory": p.used_memory_bytes,
                    "gpuInstanceId": instance,
                    "computeInstanceId": 0 if device.gpu_instance_id is not None else _NO_INSTANCE,
                }
            )
            for p in device.processes
            if kind in p.kind
        ]

    @staticmethod
    def _field(device: FakeDevice, field_id: int, scope: int) -> tuple[int, int]:
        nvlink = {
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: device.nvlink_tx_kib,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: device.nvlink_rx_kib,
        }
        pcie = {
            pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: device.pcie_tx_bytes,
            pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: device.pcie_rx_bytes,
        }
        if field_id in nvlink:
            links = nvlink[field_id]
            if links is None:
                return pynvml.NVML_ERROR_NOT_SUPPORTED, 0
            if scope == _ALL_LINKS:
                if not device.nvlink_aggregate_scope:
                    return pynvml.NVML_ERROR_INVALID_ARGUMENT, 0
                return pynvml.NVML_SUCCESS, sum(links)
            if scope < len(links):
                return pynvml.NVML_SUCCESS, links[scope]
            return pynvml.NVML_ERROR_INVALID_ARGUMENT, 0
        value = pcie.get(field_id)
        if value is None:
            return pynvml.NVML_ERROR_NOT_SUPPORTED, 0
        return pynvml.NVML_SUCCESS, value


# -- nvidia-smi XML ----------------------------------------------------------------------


def _supported(value: Any) -> Any:
    if value is None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    return value


def _text(element: ET.Element, path: str) -> str | None:
    """The stripped text at ``path``; ``None`` when absent or shown as not available."""
    found = element.find(path)
    if found is None or found.text is None:
        return None
    text = found.text.strip()
    lowered = text.lower()
    if lowered in _UNAVAILABLE or lowered.startswith(_UNAVAILABLE_PREFIX):
        return None
    return text


def _number(element: ET.Element, path: str, unit: str) -> float | None:
    text = _text(element, path)
    if text is None:
        return None
    if unit and text.endswith(unit):
        text = text[: -len(unit)].strip()
    return float(text)


def _int(element: ET.Element, path: str, unit: str) -> int | None:
    value = _number(element, path, unit)
    return int(value) if value is not None else None


def _mib(element: ET.Element, path: str) -> int | None:
    value = _number(element, path, "MiB")
    return int(value * _MIB) if value is not None else None


def _power_mw(gpu: ET.Element) -> int | None:
    # v11: power_readings/power_draw; v12: gpu_power_readings/power_draw; v13 splits it into
    # average_power_draw (what nvmlDeviceGetPowerUsage gives: a 1 s average on Ampere and
    # later) and instant_power_draw.
    for path in (
        "gpu_power_readings/average_power_draw",
        "gpu_power_readings/power_draw",
        "power_readings/power_draw",
        "gpu_power_readings/instant_power_draw",
    ):
        watts = _number(gpu, path, "W")
        if watts is not None:
            return round(watts * 1000)
    return None


def _ecc(gpu: ET.Element, counter: str) -> tuple[int, int] | None:
    """(corrected, uncorrected) over all memory locations; ``None`` if any is unavailable."""
    block = gpu.find(f"ecc_errors/{counter}")
    if block is None:
        return None
    if block.find("single_bit") is not None:  # schema v10 and older
        corrected, uncorrected = (
            _int(block, "single_bit/total", ""),
            _int(block, "double_bit/total", ""),
        )
        return (
            (corrected, uncorrected) if corrected is not None and uncorrected is not None else None
        )
    totals = [0, 0]
    counted = False
    for child in block:
        if child.tag.endswith("_correctable"):
            slot = 0
        elif "_uncorrectable" in child.tag:
            slot = 1
        else:
            continue
        value = _int(block, child.tag, "")
        if value is None:
            return None
        totals[slot] += value
        counted = True
    return (totals[0], totals[1]) if counted else None


def _mig(text: str) -> int:
    return (
        pynvml.NVML_DEVICE_MIG_ENABLE
        if text.lower() == "enabled"
        else pynvml.NVML_DEVICE_MIG_DISABLE
    )
