"""GPU readings from DCGM through its Python bindings, overlaid on the NVML readings.

NVML alone cannot say how busy a GPU really is: ``utilization.gpu`` is 100 % while one tiny
kernel runs. DCGM's profiling fields (SM active, tensor active, DRAM active) can, so on
nodes with DCGM the agent reads them here. The NVML source (``base``) still supplies
identity, MIG instances and the process list, which DCGM's field cache does not; DCGM
values are laid over its readings by GPU UUID (``DCGM_FI_DEV_UUID``). Without a base,
identity comes from DCGM's own fields.

The bindings are not on PyPI: the DCGM package installs them under
``/usr/local/dcgm/bindings/python3``. :func:`load_dcgm_bindings` imports them from there
only when this source is built, so the agent runs without them. Tests pass a reader double
with the one method used, ``GetLatestGpuValuesAsFieldIdDict()``.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, cast

from gpuscope.agent.devices.sources import GpuSource
from gpuscope.core.dcgm import FB_RESERVED, FIELDS, field_values_to_attributes, is_blank
from gpuscope.core.errors import SourceError
from gpuscope.core.records import GpuReading

log = logging.getLogger(__name__)

DEFAULT_BINDINGS_PATH = Path("/usr/local/dcgm/bindings/python3")

#: Fields watched: identity and everything mapped. FB_RESERVED is left out because older
#: DCGM releases do not know it, and an unknown field fails the whole field group.
WATCH_FIELD_IDS: tuple[int, ...] = tuple(
    f.field_id for f in FIELDS if f.role != "unmapped" and f.field_id != FB_RESERVED
)
_DRIVER_VERSION, _NAME, _NVML_INDEX, _UUID, _PCI_BUSID = 1, 50, 52, 54, 57
#: Reading attributes DCGM values replace on the base readings.
_METRIC_ATTRIBUTES: tuple[str, ...] = tuple(
    sorted({f.attribute for f in FIELDS if f.role == "metric" and f.attribute is not None})
)


class DcgmReaderLike(Protocol):
    """The part of ``DcgmReader.DcgmReader`` this source uses."""

    def GetLatestGpuValuesAsFieldIdDict(self) -> Mapping[int, Mapping[int, Any]]: ...


ReaderFactory = Callable[[], DcgmReaderLike]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]


def load_dcgm_bindings(path: Path = DEFAULT_BINDINGS_PATH) -> ModuleType:
    """Import DCGM's ``DcgmReader`` module from ``path`` and return it.

    ``path`` is on ``sys.path`` only for the import (``DcgmReader`` pulls in ``pydcgm``,
    ``dcgm_structs``, ``dcgm_fields`` and ``dcgm_agent`` from the same folder), so that the
    bindings' generic module names do not shadow anything for the rest of the process.
    """
    if not (path / "DcgmReader.py").is_file():
        raise SourceError(f"DCGM bindings not found under {path} (no DcgmReader.py)")
    entry = str(path)
    added = entry not in sys.path
    if added:
        sys.path.insert(0, entry)
    try:
        return importlib.import_module("DcgmReader")
    except Exception as exc:  # ImportError, or the bindings failing at import
        raise SourceError(f"DCGM bindings under {path} failed to import: {_one_line(exc)}") from exc
    finally:
        if added:
            sys.path.remove(entry)


class DcgmSource:
    """A :class:`~gpuscope.agent.devices.sources.GpuSource` reading DCGM's latest field values."""

    name = "dcgm"

    def __init__(
        self, reader: DcgmReaderLike | ReaderFactory, *, base: GpuSource | None = None
    ) -> None:
        """``reader`` is a ready reader or a factory making one (again after a failure).

        The source owns the reader and shuts it down in :meth:`close`, along with ``base``.
        """
        self._reader: DcgmReaderLike | None = None
        self._factory: ReaderFactory | None = None
        if hasattr(reader, "GetLatestGpuValuesAsFieldIdDict"):
            self._reader = cast(DcgmReaderLike, reader)
        else:
            self._factory = reader
        self._base = base

    @classmethod
    def from_bindings(
        cls,
        path: Path = DEFAULT_BINDINGS_PATH,
        *,
        base: GpuSource | None = None,
        hostname: str | None = "localhost",
        update_interval_s: float = 5.0,
    ) -> DcgmSource:
        """Build the source on the real bindings.

        ``hostname`` is nv-hostengine's address; ``None`` starts an embedded host engine in
        this process. ``update_interval_s`` is DCGM's sampling period (profiling values are
        averages over it).
        """
        module = load_dcgm_bindings(path)

        def factory() -> DcgmReaderLike:
            reader: DcgmReaderLike = module.DcgmReader(
                hostname=hostname,
                fieldIds=list(WATCH_FIELD_IDS),
                updateFrequency=int(update_interval_s * 1_000_000),  # microseconds
                fieldGroupName="gpuscope_agent",
            )
            return reader

        return cls(factory, base=base)

    def _latest(self) -> Mapping[int, Mapping[int, Any]]:
        if self._reader is None:
            if self._factory is None:
                raise SourceError("dcgm: no reader")
            try:
                self._reader = self._factory()
            except Exception as exc:
                raise SourceError(f"dcgm: cannot start a DCGM reader: {_one_line(exc)}") from exc
        try:
            values = self._reader.GetLatestGpuValuesAsFieldIdDict()
        except Exception as exc:
            # DcgmReader keeps a half-made connection after a failed set-up; start afresh.
            self._discard_reader()
            raise SourceError(f"dcgm: reading field values failed: {_one_line(exc)}") from exc
        if not isinstance(values, Mapping) or not all(
            isinstance(v, Mapping) for v in values.values()
        ):
            raise SourceError(f"dcgm: unexpected field values {type(values).__name__}")
        if not values:
            # DcgmReader logs a lost nv-hostengine connection and returns {}.
            raise SourceError("dcgm: no GPU values (is nv-hostengine running?)")
        return values

    def read(self) -> list[GpuReading]:
        base = list(self._base.read()) if self._base is not None else []
        dcgm: dict[str, GpuReading] = {}
        for gpu_id, fields in self._latest().items():
            reading = _reading_from_fields(gpu_id, fields)
            if reading is not None:
                dcgm[reading.uuid] = reading
        if self._base is None:
            return list(dcgm.values())
        out = []
        for reading in base:
            own = dcgm.pop(reading.uuid, None) if not reading.mig_instance else None
            out.append(_overlay(reading, own) if own is not None and reading.up else reading)
        for reading in dcgm.values():
            log.debug(
                "dcgm: GPU %s is not in the %s readings; reported from DCGM alone",
                reading.uuid,
                getattr(self._base, "name", "base"),
            )
            out.append(reading)
        return out

    def _discard_reader(self) -> None:
        reader, self._reader = self._reader, None
        if self._factory is None:
            self._reader = reader  # nothing to rebuild it from; keep trying the same one
            return
        _shutdown(reader)

    def close(self) -> None:
        reader, self._reader = self._reader, None
        _shutdown(reader)
        if self._base is not None:
            self._base.close()


def _shutdown(reader: object) -> None:
    shutdown = getattr(reader, "Shutdown", None)
    if callable(shutdown):
        try:
            shutdown()
        except Exception:
            log.debug("dcgm: reader shutdown failed", exc_info=True)


def _text(fields: Mapping[int, Any], field_id: int) -> str:
    value = fields.get(field_id)
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return value.strip() if isinstance(value, str) and not is_blank(value) else ""


def _reading_from_fields(gpu_id: int, fields: Mapping[int, Any]) -> GpuReading | None:
    """A reading of one GPU from its DCGM fields alone, or ``None`` without a UUID."""
    uuid = _text(fields, _UUID)
    if not uuid:
        log.warning("dcgm: GPU id %s has no DCGM_FI_DEV_UUID value; skipped", gpu_id)
        return None
    index = fields.get(_NVML_INDEX)
    if isinstance(index, bool) or not isinstance(index, int) or is_blank(index):
        index = gpu_id
    return GpuReading(
        index=int(index),
        uuid=uuid,
        model=_text(fields, _NAME),
        driver_version=_text(fields, _DRIVER_VERSION),
        pci_bus_id=_text(fields, _PCI_BUSID),
        **field_values_to_attributes(fields),
    )


def _overlay(base: GpuReading, own: GpuReading) -> GpuReading:
    """``base`` with DCGM's values where DCGM has them, and identity gaps filled."""
    changes: dict[str, Any] = {}
    for attr in ("model", "driver_version", "pci_bus_id"):
        if not getattr(base, attr) and getattr(own, attr):
            changes[attr] = getattr(own, attr)
    for attr in _METRIC_ATTRIBUTES:
        value = getattr(own, attr)
        if value is not None:
            changes[attr] = value
    return replace(base, **changes)
