"""InfiniBand (and RoCE) port counters and state, read from sysfs.

Reads ``<sysfs>/class/infiniband/<device>/ports/<port>/`` on every scrape, so the hot path
uses only ``os.scandir`` and raw ``os.open``/``os.read`` (no pathlib, no regex, no text
layer); counter files are parsed straight from bytes with ``int()``.

Why the unit and width handling:

* ``port_xmit_data`` / ``port_rcv_data`` (and their ``_64`` twins) count 4-octet words, as
  the IB PortCounters attribute defines them; they are multiplied by 4 to give bytes.
* A 32-bit PMA data counter saturates (it sticks at 0xFFFFFFFF rather than wrapping) after
  well under a second of traffic at 400 Gb/s, so the 64-bit ``counters_ext/*_64`` files
  (mlx4 and other older drivers) are preferred wherever the device has them. Modern drivers
  (mlx5) already put 64-bit values in ``counters/``; a value above 2**32-1 proves that.
  A data counter that has only its ``counters/`` file and reads exactly 0xFFFFFFFF is
  reported as it is, with ``data_counter_saturated=True``, so dashboards can tell a stuck
  counter from an idle link.

A counter that is missing, unreadable (permission, ``EINVAL`` from the driver, ``EIO``) or
not an integer (``N/A (no PMA)`` on iWARP devices, an empty file) gives no value at all,
never zero. A device or port that disappears while it is being read is skipped.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from gpuscope.errors import SourceError
from gpuscope.records import IbPortReading

logger = logging.getLogger(__name__)

_U32_MAX = 0xFFFFFFFF
#: Largest sysfs attribute (one page); a single read returns the whole value.
_READ_SIZE = 4096

#: Error counters in ``counters/``, in the order they appear in a reading's ``errors``.
_ERROR_COUNTERS: tuple[tuple[str, str], ...] = tuple(
    (name, name.lower())
    for name in (
        "symbol_error",
        "link_error_recovery",
        "link_downed",
        "port_rcv_errors",
        "port_rcv_remote_physical_errors",
        "port_rcv_switch_relay_errors",
        "port_xmit_discards",
        "port_xmit_constraint_errors",
        "port_rcv_constraint_errors",
        "local_link_integrity_errors",
        "excessive_buffer_overrun_errors",
        "VL15_dropped",
    )
)
#: Files of ``counters/`` worth opening; the rest (unicast/multicast packets...) are not read.
_COUNTERS_WANTED = frozenset(
    {
        "port_xmit_data",
        "port_rcv_data",
        "port_xmit_packets",
        "port_rcv_packets",
        "port_xmit_wait",
        *(name for name, _ in _ERROR_COUNTERS),
    }
)
#: 64-bit files of ``counters_ext/`` (mlx4-style) that replace their ``counters/`` twin.
_EXT_WANTED = frozenset(
    {"port_xmit_data_64", "port_rcv_data_64", "port_xmit_packets_64", "port_rcv_packets_64"}
)
#: Files of ``hw_counters/`` that are settings, not counters.
_HW_NOT_COUNTERS = frozenset({"lifespan"})


def _read(path: str) -> bytes | None:
    """The raw content of one sysfs file, or ``None`` (logged) if it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        logger.debug("ib file skipped path=%s reason=%s", path, exc.strerror or exc)
        return None
    try:
        return os.read(fd, _READ_SIZE)
    except OSError as exc:  # EINVAL from some drivers, EIO, EISDIR...
        logger.debug("ib file skipped path=%s reason=%s", path, exc.strerror or exc)
        return None
    finally:
        os.close(fd)


def _read_int(path: str) -> int | None:
    """A counter file as an integer, or ``None`` if unreadable or not a number."""
    raw = _read(path)
    if raw is None:
        return None
    try:
        return int(raw)  # int() takes bytes and ignores surrounding whitespace
    except ValueError:
        logger.debug("ib file skipped path=%s reason=not_an_integer content=%r", path, raw[:40])
        return None


def _read_text(path: str) -> str | None:
    """A text attribute stripped of whitespace, or ``None`` if unreadable or empty."""
    raw = _read(path)
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace").strip()
    return text or None


def _read_counter_dir(
    path: str, wanted: frozenset[str] | None, skip: frozenset[str] = frozenset()
) -> dict[str, int] | None:
    """Integer files of one counter directory: those in ``wanted`` (all if ``None``).

    ``None`` means the directory vanished after its parent was listed (the port is gone);
    an unreadable directory gives ``{}``.
    """
    values: dict[str, int] = {}
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                name = entry.name
                if (name in wanted) if wanted is not None else (name not in skip):
                    value = _read_int(entry.path)
                    if value is not None:
                        values[name] = value
    except FileNotFoundError:
        logger.debug("ib directory vanished path=%s", path)
        return None
    except OSError as exc:
        logger.debug("ib directory skipped path=%s reason=%s", path, exc.strerror or exc)
    return values


def _after_colon(text: str | None) -> str:
    """``"4: ACTIVE"`` -> ``"ACTIVE"``; text without a colon is kept whole."""
    if text is None:
        return ""
    head, sep, tail = text.partition(":")
    return tail.strip() if sep else head


def parse_rate(text: str | None) -> float | None:
    """``"40 Gb/sec (4X QDR)"`` or ``"2.5 Gb/sec"`` -> bytes per second (``None`` if unknown)."""
    if not text:
        return None
    parts = text.split(None, 2)
    if len(parts) < 2 or parts[1] != "Gb/sec":
        return None
    try:
        gbits = float(parts[0])
    except ValueError:
        return None
    return gbits * 1e9 / 8


def _words_to_bytes(
    ext: dict[str, int], counters: dict[str, int], name: str
) -> tuple[int | None, bool]:
    """Bytes of one data counter, preferring the 64-bit file; and whether it is saturated."""
    words = ext.get(name + "_64")
    if words is not None:
        return words * 4, False
    words = counters.get(name)
    if words is None:
        return None, False
    return words * 4, words == _U32_MAX


def _port_sort_key(reading: IbPortReading) -> tuple[str, int, str]:
    port = reading.port
    return (reading.device, int(port) if port.isdigit() else 1 << 30, port)


class SysfsIbSource:
    """Reads every InfiniBand port of this node from sysfs (an :class:`IbSource`)."""

    def __init__(self, sysfs_root: Path, name: str = "infiniband") -> None:
        self.name = name
        self.sysfs_root = sysfs_root
        self._class_dir = os.path.join(os.fspath(sysfs_root), "class", "infiniband")

    def read(self) -> list[IbPortReading]:
        """One reading per port, sorted by device then port number; ``[]`` without IB.

        Raises :class:`SourceError` only when ``class/infiniband`` exists but cannot be listed.
        """
        try:
            with os.scandir(self._class_dir) as it:
                devices = [(entry.name, entry.path) for entry in it]
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise SourceError(f"cannot list {self._class_dir}: {exc.strerror or exc}") from exc
        readings: list[IbPortReading] = []
        for device, device_path in devices:
            ports_path = device_path + "/ports"
            try:
                with os.scandir(ports_path) as it:
                    ports = [(entry.name, entry.path) for entry in it]
            except OSError as exc:  # device removed since listing, or no ports/ at all
                logger.debug("ib device skipped device=%s reason=%s", device, exc.strerror or exc)
                continue
            for port, port_path in ports:
                reading = self._read_port(device, port, port_path)
                if reading is not None:
                    readings.append(reading)
        readings.sort(key=_port_sort_key)
        return readings

    def _read_port(self, device: str, port: str, path: str) -> IbPortReading | None:
        """One port, or ``None`` if it vanished (or cannot be listed) while being read."""
        try:
            with os.scandir(path) as it:
                present = {entry.name for entry in it}
        except OSError as exc:
            logger.debug(
                "ib port skipped device=%s port=%s reason=%s", device, port, exc.strerror or exc
            )
            return None
        counters: dict[str, int] | None = {}
        ext: dict[str, int] | None = {}
        hw: dict[str, int] | None = {}
        if "counters" in present:
            counters = _read_counter_dir(path + "/counters", _COUNTERS_WANTED)
        if "counters_ext" in present and counters is not None:
            ext = _read_counter_dir(path + "/counters_ext", _EXT_WANTED)
        if "hw_counters" in present and counters is not None and ext is not None:
            hw = _read_counter_dir(path + "/hw_counters", None, _HW_NOT_COUNTERS)
        if counters is None or ext is None or hw is None:
            logger.debug("ib port skipped device=%s port=%s reason=vanished", device, port)
            return None

        state = _after_colon(_read_text(path + "/state") if "state" in present else None)
        phys = _after_colon(_read_text(path + "/phys_state") if "phys_state" in present else None)
        rate = _read_text(path + "/rate") if "rate" in present else None
        link_layer = _read_text(path + "/link_layer") if "link_layer" in present else None
        tx_bytes, tx_saturated = _words_to_bytes(ext, counters, "port_xmit_data")
        rx_bytes, rx_saturated = _words_to_bytes(ext, counters, "port_rcv_data")
        tx_packets = ext.get("port_xmit_packets_64", counters.get("port_xmit_packets"))
        rx_packets = ext.get("port_rcv_packets_64", counters.get("port_rcv_packets"))
        return IbPortReading(
            device=device,
            port=port,
            link_layer=link_layer or "",
            state=state,
            phys_state=phys,
            up=(state == "ACTIVE") if state else None,
            rate_bytes_per_second=parse_rate(rate),
            transmit_bytes_total=tx_bytes,
            receive_bytes_total=rx_bytes,
            transmit_packets_total=tx_packets,
            receive_packets_total=rx_packets,
            transmit_wait_total=counters.get("port_xmit_wait"),
            data_counter_saturated=tx_saturated or rx_saturated,
            errors=tuple(
                (label, counters[name]) for name, label in _ERROR_COUNTERS if name in counters
            ),
            hw_counters=tuple(sorted(hw.items())),
        )
