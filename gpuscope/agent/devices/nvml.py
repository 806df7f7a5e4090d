"""GPU readings from NVML (``nvidia-ml-py``), the driver's own management library.

NVML is what ``nvidia-smi`` reads, it is on every node with the driver, and it is the only
source of per-process GPU memory and per-process utilization samples, which is how pods that
share one GPU (time-slicing, fractions) each get their own share. DCGM adds profiling fields
(SM, tensor and DRAM activity) that NVML does not have; those stay ``None`` here.

Rules this module keeps:

* A field the device cannot give (``NotSupported``, ``NoPermission``, any other error on that
  one call) is ``None``, never 0, so exposition leaves the series out.
* A GPU that fails as a whole (lost from the bus, reset required, no handle) is reported with
  ``up=False``, its UUID and model as last seen, and the error; the other GPUs carry on.
* NVML itself failing (not initialised, driver gone, device count unreadable) raises
  :class:`gpuscope.core.errors.SourceError`, so the agent reports this source down.
* Under MIG the parent's utilization means nothing (NVML refuses it), so the parent has none,
  and each MIG device is its own reading. NVML has no plain utilization for a MIG device, so
  an instance's ``utilization_ratio`` is the sum of its processes' SM samples (capped at 1.0)
  and ``None`` when there are no samples; nothing is made up.
* PCIe byte counters come from the ``PCIE_COUNT_*_BYTES`` fields where the driver has them.
  Otherwise they are an *estimate*: the instantaneous PCIe throughput (KB/s, a 20 ms sample)
  times the time since the previous read, summed into a per-GPU total that starts at 0 when
  the agent starts. The collector treats the restart as a counter reset.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gpuscope.core.errors import SourceError
from gpuscope.core.records import GpuProcess, GpuReading

logger = logging.getLogger(__name__)

#: ``scopeId`` that asks a per-link NVLink field for the sum over all links (nvml.h).
_ALL_LINKS = 0xFFFFFFFF
_NOT_AVAILABLE_U64 = 0xFFFFFFFFFFFFFFFF
#: NVML uses 1 KiB for its ``KB`` (NVLink fields say KiB; throughput says KB/s).
_KIB = 1024
#: ``nvmlValueType_t`` -> member of the ``nvmlValue_t`` union (nvml.h, stable ABI).
_VALUE_MEMBER = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}
_MIG_PROFILE = re.compile(r"\b(\d+g\.\d+gb(?:\+\w+)*)\b", re.IGNORECASE)

#: Errors after which nothing else on this device can be read.
_DEVICE_FATAL = ("NVMLError_GpuIsLost", "NVMLError_ResetRequired")
#: Errors after which nothing at all can be read through NVML.
_SOURCE_FATAL = (
    "NVMLError_Uninitialized",
    "NVMLError_DriverNotLoaded",
    "NVMLError_LibRmVersionMismatch",
    "NVMLError_LibraryNotFound",
)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace").rstrip("\x00")
    return "" if value is None else str(value)


def _scaled(value: Any, factor: float = 1.0, divisor: float = 1.0) -> float | None:
    return None if value is None else float(value) * factor / divisor


def _ratio(percent: Any) -> float | None:
    """A 0..100 percentage as 0..1; ``None`` for NVML's "not available" sentinels."""
    if percent is None or not 0 <= percent <= 100:
        return None
    return float(percent) / 100.0


@dataclass(slots=True)
class _PcieEstimate:
    """Running PCIe byte totals integrated from throughput samples (see module docstring)."""

    last_at: float
    tx_bytes: float | None = None
    rx_bytes: float | None = None


class NvmlSource:
    """A :class:`gpuscope.agent.devices.sources.GpuSource` reading every GPU (and MIG device)
    through NVML."""

    def __init__(
        self,
        nvml: ModuleType | Any = None,
        *,
        name: str = "nvml",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if nvml is None:
            try:
                import pynvml
            except ImportError as exc:  # pragma: no cover - it is a dependency
                raise SourceError("NVML is not available: nvidia-ml-py is not installed") from exc
            nvml = pynvml
        self.name = name
        self._nvml = nvml
        self._clock = clock
        self._error: type[BaseException] = nvml.NVMLError
        self._not_found = self._classes(("NVMLError_NotFound",))
        self._device_fatal = self._classes(_DEVICE_FATAL)
        self._source_fatal = self._classes(_SOURCE_FATAL)
        self._fatal = self._device_fatal + self._source_fatal
        self._tolerated = (self._error, *self._classes(("NVMLLibraryMismatchError",)))
        self._uuids: dict[int, str] = {}
        self._models: dict[int, str] = {}
        self._last_seen: dict[str, int] = {}
        self._pcie_field: dict[str, bool] = {}
        self._pcie_estimates: dict[str, _PcieEstimate] = {}
        self._no_nvlink: set[str] = set()
        self._closed = False
        try:
            nvml.nvmlInit()
        except self._error as exc:
            raise SourceError(f"NVML is not available: {exc}") from exc

    def _classes(self, names: tuple[str, ...]) -> tuple[type[BaseException], ...]:
        found = (getattr(self._nvml, name, None) for name in names)
        return tuple(cls for cls in found if isinstance(cls, type))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._nvml.nvmlShutdown()
        except self._error as exc:
            logger.debug("nvml shutdown failed error=%s", exc)

    def read(self) -> list[GpuReading]:
        nv = self._nvml
        try:
            count = int(nv.nvmlDeviceGetCount())
        except self._error as exc:
            raise SourceError(f"NVML cannot count GPUs: {exc}") from exc
        readings: list[GpuReading] = []
        try:
            driver = _text(self._opt(nv.nvmlSystemGetDriverVersion))
            for index in range(count):
                try:
                    readings.extend(self._read_gpu(index, driver))
                except self._source_fatal:
                    raise
                except self._tolerated as exc:
                    logger.debug("nvml gpu down index=%d error=%s", index, exc)
                    readings.append(
                        GpuReading(
                            index=index,
                            uuid=self._uuids.get(index, ""),
                            model=self._models.get(index, ""),
                            driver_version=driver,
                            up=False,
                            error=str(exc) or type(exc).__name__,
                        )
                    )
        except self._source_fatal as exc:
            raise SourceError(f"NVML stopped answering: {exc}") from exc
        return readings

    # -- one GPU -------------------------------------------------------------------------

    def _read_gpu(self, index: int, driver: str) -> list[GpuReading]:
        nv = self._nvml
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(self._opt(nv.nvmlDeviceGetUUID, handle)) or self._uuids.get(index, "")
        model = _text(self._opt(nv.nvmlDeviceGetName, handle)) or self._models.get(index, "")
        self._uuids[index], self._models[index] = uuid, model
        key = uuid or f"index:{index}"
        pci = self._opt(nv.nvmlDeviceGetPciInfo, handle)
        pci_bus_id = _text(getattr(pci, "busId", "")) if pci is not None else ""
        mig_mode = self._mig_mode(handle)
        mig = mig_mode == "enabled"
        # Under MIG NVML has no whole-GPU utilization; do not ask for a number it would refuse.
        util = None if mig else self._opt(nv.nvmlDeviceGetUtilizationRates, handle)
        used, total = self._memory(handle)
        power_mw = self._opt(nv.nvmlDeviceGetPowerUsage, handle)
        temperature = self._opt(nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU)
        energy_mj = self._opt(nv.nvmlDeviceGetTotalEnergyConsumption, handle)
        sm_mhz = self._opt(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM)
        mem_mhz = self._opt(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_MEM)
        nvlink_tx, nvlink_rx = self._nvlink(key, handle)
        pcie_tx, pcie_rx = self._pcie(key, handle)
        gpu = GpuReading(
            index=index,
            uuid=uuid,
            model=model,
            driver_version=driver,
            pci_bus_id=pci_bus_id,
            mig_mode=mig_mode,
            utilization_ratio=_ratio(util.gpu) if util is not None else None,
            memory_utilization_ratio=_ratio(util.memory) if util is not None else None,
            memory_used_bytes=used,
            memory_total_bytes=total,
            power_watts=_scaled(power_mw, divisor=1000),
            temperature_celsius=_scaled(temperature),
            energy_joules_total=_scaled(energy_mj, divisor=1000),
            sm_clock_hz=_scaled(sm_mhz, 1e6),
            memory_clock_hz=_scaled(mem_mhz, 1e6),
            ecc_corrected_total=self._ecc(handle, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ecc_uncorrected_total=self._ecc(handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
            nvlink_tx_bytes_total=nvlink_tx,
            nvlink_rx_bytes_total=nvlink_rx,
            pcie_tx_bytes_total=pcie_tx,
            pcie_rx_bytes_total=pcie_rx,
            # Under MIG the processes belong to the instances; listing them here too would
            # count their memory twice.
            processes=() if mig else self._processes(key, handle),
        )
        if not mig:
            return [gpu]
        return [gpu, *self._mig_devices(gpu, handle)]

    def _mig_mode(self, handle: Any) -> str:
        mode = self._opt(self._nvml.nvmlDeviceGetMigMode, handle)
        if mode is None:
            return "unsupported"
        current = mode[0]
        if current == 1:
            return "enabled"
        return "disabled" if current == 0 else "unsupported"

    def _memory(self, handle: Any) -> tuple[int | None, int | None]:
        info = self._opt(self._nvml.nvmlDeviceGetMemoryInfo, handle)
        if info is None:
            return None, None
        return int(info.used), int(info.total)

    def _ecc(self, handle: Any, error_type: int) -> int | None:
        # Volatile: counted since the driver loaded, as the metric's help text says.
        nv = self._nvml
        count = self._opt(nv.nvmlDeviceGetTotalEccErrors, handle, error_type, nv.NVML_VOLATILE_ECC)
        return int(count) if count is not None else None

    def _mig_devices(self, parent: GpuReading, handle: Any) -> list[GpuReading]:
        nv = self._nvml
        readings: list[GpuReading] = []
        for slot in range(int(self._opt(nv.nvmlDeviceGetMaxMigDeviceCount, handle) or 0)):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except self._not_found:
                continue  # an empty slot
            except self._fatal:
                raise
            except self._tolerated as exc:
                logger.debug(
                    "nvml mig slot skipped gpu=%s slot=%d error=%s", parent.uuid, slot, exc
                )
                continue
            uuid = _text(self._opt(nv.nvmlDeviceGetUUID, mig))
            instance = self._opt(nv.nvmlDeviceGetGpuInstanceId, mig)
            profile = _MIG_PROFILE.search(_text(self._opt(nv.nvmlDeviceGetName, mig)))
            used, total = self._memory(mig)
            processes = self._processes(uuid or f"{parent.uuid}/mig:{slot}", mig)
            sm = [p.sm_utilization_ratio for p in processes if p.sm_utilization_ratio is not None]
            readings.append(
                GpuReading(
                    index=parent.index,
                    uuid=uuid,
                    model=parent.model,
                    driver_version=parent.driver_version,
                    pci_bus_id=parent.pci_bus_id,
                    mig_mode="enabled",
                    mig_instance=str(instance) if instance is not None else "",
                    mig_profile=profile.group(1) if profile else "",
                    parent_uuid=parent.uuid,
                    # No NVML field gives a MIG device's activity; the sum of its processes'
                    # SM samples is what NVML knows. No samples: not available.
                    utilization_ratio=min(1.0, sum(sm)) if sm else None,
                    memory_used_bytes=used,
                    memory_total_bytes=total,
                    processes=processes,
                )
            )
        return readings

    # -- processes -----------------------------------------------------------------------

    def _processes(self, key: str, handle: Any) -> tuple[GpuProcess, ...]:
        nv = self._nvml
        memory: dict[int, int | None] = {}
        for function in (
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetGraphicsRunningProcesses",
        ):
            call = getattr(nv, function, None)
            for proc in (self._opt(call, handle) if call is not None else None) or ():
                used = getattr(proc, "usedGpuMemory", None)
                if used is None or not 0 <= used < _NOT_AVAILABLE_U64:
                    used = None
                pid = int(proc.pid)
                if memory.get(pid) is None:
                    memory[pid] = int(used) if used is not None else None
        samples = self._samples(key, handle)
        return tuple(
            GpuProcess(
                pid=pid,
                used_memory_bytes=memory[pid],
                sm_utilization_ratio=samples.get(pid, (None, None))[0],
                memory_utilization_ratio=samples.get(pid, (None, None))[1],
            )
            for pid in sorted(memory)
        )

    def _samples(self, key: str, handle: Any) -> dict[int, tuple[float | None, float | None]]:
        """Per-process (SM, memory) ratios from the samples taken since the previous read."""
        if not hasattr(self._nvml, "nvmlDeviceGetProcessUtilization"):
            return {}
        last = self._last_seen.get(key, 0)
        try:
            samples = self._nvml.nvmlDeviceGetProcessUtilization(handle, last)
        except self._not_found:
            return {}  # no samples since ``last``
        except self._fatal:
            raise
        except self._tolerated as exc:
            # pynvml raises NVMLError(NVML_SUCCESS) when the driver answers with no samples.
            if getattr(exc, "value", None) != 0:
                logger.debug("nvml process samples unavailable device=%s error=%s", key, exc)
            return {}
        latest: dict[int, Any] = {}
        for sample in samples:
            previous = latest.get(sample.pid)
            if previous is None or sample.timeStamp >= previous.timeStamp:
                latest[sample.pid] = sample
        if latest:
            self._last_seen[key] = max(last, *(s.timeStamp for s in latest.values()))
        return {pid: (_ratio(s.smUtil), _ratio(s.memUtil)) for pid, s in latest.items()}

    # -- counters from field values ------------------------------------------------------

    def _fields(self, handle: Any, ids: list[tuple[int, int]]) -> list[float | None]:
        """Field values in ``ids`` order; ``None`` for each one the driver did not give."""
        values = self._opt(self._nvml.nvmlDeviceGetFieldValues, handle, ids)
        if values is None:
            return [None] * len(ids)
        out: list[float | None] = []
        for value in values:
            member = _VALUE_MEMBER.get(int(value.valueType))
            if int(value.nvmlReturn) != 0 or member is None:
                out.append(None)
            else:
                out.append(float(getattr(value.value, member)))
        return out

    def _nvlink(self, key: str, handle: Any) -> tuple[float | None, float | None]:
        if key in self._no_nvlink:
            return None, None
        nv = self._nvml
        tx_id, rx_id = (
            nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        )
        # Per-link fields: a bare field id would read link 0 only. Ask for the sum over links.
        tx, rx = self._fields(handle, [(tx_id, _ALL_LINKS), (rx_id, _ALL_LINKS)])
        if tx is None and rx is None:
            # A driver without the aggregate scope: sum the links that answer.
            links = range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)))
            values = self._fields(handle, [(f, link) for link in links for f in (tx_id, rx_id)])
            tx_links = [v for v in values[0::2] if v is not None]
            rx_links = [v for v in values[1::2] if v is not None]
            tx = sum(tx_links) if tx_links else None
            rx = sum(rx_links) if rx_links else None
            if tx is None and rx is None:
                logger.debug("nvml nvlink counters unavailable device=%s", key)
                self._no_nvlink.add(key)
                return None, None
        return _scaled(tx, _KIB), _scaled(rx, _KIB)

    def _pcie(self, key: str, handle: Any) -> tuple[float | None, float | None]:
        nv = self._nvml
        use_field = self._pcie_field.get(key)
        if use_field is None or use_field:
            tx, rx = self._fields(
                handle,
                [(nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0), (nv.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0)],
            )
            if use_field is None:
                # Decided once per GPU: mixing a real counter and an estimate would break both.
                use_field = self._pcie_field[key] = tx is not None or rx is not None
            if use_field:
                return tx, rx
        return self._pcie_estimate(key, handle)

    def _pcie_estimate(self, key: str, handle: Any) -> tuple[float | None, float | None]:
        nv = self._nvml
        now = self._clock()
        tx_rate = self._opt(nv.nvmlDeviceGetPcieThroughput, handle, nv.NVML_PCIE_UTIL_TX_BYTES)
        rx_rate = self._opt(nv.nvmlDeviceGetPcieThroughput, handle, nv.NVML_PCIE_UTIL_RX_BYTES)
        estimate = self._pcie_estimates.get(key)
        if estimate is None:
            estimate = self._pcie_estimates[key] = _PcieEstimate(last_at=now)
        elapsed = max(0.0, now - estimate.last_at)
        estimate.last_at = now
        if tx_rate is not None:
            estimate.tx_bytes = (estimate.tx_bytes or 0.0) + tx_rate * _KIB * elapsed
        if rx_rate is not None:
            estimate.rx_bytes = (estimate.rx_bytes or 0.0) + rx_rate * _KIB * elapsed
        return estimate.tx_bytes, estimate.rx_bytes

    # -- calls ---------------------------------------------------------------------------

    def _opt(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)``, or ``None`` when the device cannot give that one value."""
        try:
            return function(*args)
        except self._fatal:
            raise
        except self._tolerated as exc:
            logger.debug(
                "nvml field unavailable call=%s error=%s",
                getattr(function, "__name__", function),
                exc,
            )
            return None
