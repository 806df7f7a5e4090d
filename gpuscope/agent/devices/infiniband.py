"""InfiniBand (and RoCE) port counters and state, read from sysfs.

Reads ``<sysfs>/class/infiniband/<device>/ports/<port>/`` on every scrape, so the hot path
uses only ``os.scandir`` and raw file descriptors (no pathlib, no regex, no text layer), and
parses counters straight from bytes with ``int()``. Opening and listing ~45 files per port
costs more than reading them, so between scrapes the source keeps

* each file open and re-reads it with ``pread(fd, 4096, 0)``: sysfs regenerates an
  attribute on every read at offset 0, and kernfs does not pin a device for its open files
  (a read of a removed one fails with ``ENODEV``; the file is then reopened or dropped);
* each counter directory's listing while the directory keeps its inode (the kernel creates
  a port's counter files once, with the port); a listed file that is gone forces a relist.

Devices, ``ports/`` and port directories are listed afresh on every scrape, and whatever a
scrape did not use is closed.

Why the unit and width handling:

* ``port_xmit_data`` / ``port_rcv_data`` (and their ``_64`` twins) count 4-octet words, as
  the IB PortCounters attribute defines them; they are multiplied by 4 to give bytes.
* A 32-bit PMA data counter saturates (sticks at 0xFFFFFFFF, no wrap) in under a second at
  400 Gb/s, so the 64-bit ``counters_ext/*_64`` files (mlx4-style) are preferred wherever
  the device has them; mlx5 already puts 64-bit values in ``counters/`` (a value above
  2**32-1 proves it). A data counter with only its ``counters/`` file reading exactly
  0xFFFFFFFF is reported as it is, with ``data_counter_saturated=True``. Beside a 64-bit
  twin stuck at 0 it is not: that pair has no usable value (the next scrape may read the
  64-bit counter again, and the series would jump by the 32-bit value), so it gives none.

A counter that is missing, unreadable (permission, ``EINVAL`` from the driver, ``EIO``, a
FIFO planted in the tree) or not an integer gives no value at all, never zero; one that is
not an integer is counted (``not_an_integer``), except what drivers write on purpose
(``N/A (no PMA)`` on iWARP devices, an empty file). A 64-bit twin reading 0 beside such a
32-bit file is dead, not idle: the pair gives no value (``dead_64bit``), where it used to
give 0 and, at the next good scrape, a jump of the whole 32-bit count. A device or port
that disappears while it is being read is skipped.

What no working kernel writes is skipped and counted in :attr:`SysfsIbSource.errors` (the
agent exports it as ``gpuscope_agent_errors_total{source="infiniband",reason}``), so that
one bad file never fails the page: a device or port whose name is not UTF-8
(``name_not_utf8``), a counter below 0 (``negative``) or past 2**64-1 (``out_of_range``,
such as a 400-digit value), a rate that is not a finite, non-negative number
(``not_finite``), and the dead 64-bit counter beside a saturated 32-bit one
(``saturated_32bit``). Each is counted once per scrape that skips it.
"""

from __future__ import annotations

import logging
import os
import resource
import threading
from collections.abc import Callable
from pathlib import Path

from gpuscope.agent.devices.ib_values import (
    _after_colon,
    _not_an_integer,
    _parse_rate,
    _prefer_64,
    _words_to_bytes,
    parse_rate,
)
from gpuscope.agent.devices.sources import ErrorCounts
from gpuscope.core.errors import SourceError
from gpuscope.core.records import IbPortReading

logger = logging.getLogger(__name__)

#: sysfs counters are unsigned 64-bit integers; a value past this is not a counter reading.
_U64_MAX = (1 << 64) - 1
#: Largest sysfs attribute (one page); a single read returns the whole value.
_READ_SIZE = 4096
#: Files kept open between scrapes at most (8 ports need ~360; never over a quarter of the
#: process's file limit); more are opened and closed on each read.
_MAX_OPEN_FILES = 1024
#: How long :meth:`SysfsIbSource.close` waits for a read under way.
_CLOSE_WAIT_SECONDS = 1.0
#: ``O_NONBLOCK``: opening a FIFO planted in the tree does not wait for a writer (its
#: read then fails with ESPIPE and the file is skipped); no effect on sysfs attributes.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK

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
#: ``counters/`` files that have a 64-bit twin in ``counters_ext/``.
_EXT_TWINS = frozenset(name.removesuffix("_64") for name in _EXT_WANTED)
#: Files of ``hw_counters/`` that are settings, not counters.
_HW_NOT_COUNTERS = frozenset({"lifespan"})
#: The counter directories of a port, and which of their files to read.
_COUNTER_DIRS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("counters", _COUNTERS_WANTED.__contains__),
    ("counters_ext", _EXT_WANTED.__contains__),
    ("hw_counters", lambda name: name not in _HW_NOT_COUNTERS),
)
#: The files of a counter directory worth reading, as (name, path).
_Listing = tuple[tuple[str, str], ...]
#: Counter values by file name; ``None`` when the directory vanished while being read.
_Counters = dict[str, int] | None


def _utf8(name: str) -> bool:
    """Whether a file name from ``os.scandir`` is UTF-8 (else it holds surrogate escapes)."""
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _port_sort_key(reading: IbPortReading) -> tuple[str, int, str]:
    port = reading.port
    return (reading.device, int(port) if port.isdigit() else 1 << 30, port)


class SysfsIbSource:
    """Reads every InfiniBand port of this node from sysfs (an :class:`IbSource`).

    Holds files open between calls to :meth:`read`; :meth:`close` releases them. Made for
    sysfs: on a plain file system (tests), a counter file added to a directory already
    listed is not seen, and a deleted file that is still held open keeps its last value.
    """

    def __init__(self, sysfs_root: Path, name: str = "infiniband") -> None:
        self.name = name
        self.sysfs_root = sysfs_root
        self._class_dir = os.path.join(os.fspath(sysfs_root), "class", "infiniband")
        self._lock = threading.Lock()
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self._max_open = (
            _MAX_OPEN_FILES if soft_limit < 0 else min(_MAX_OPEN_FILES, soft_limit // 4)
        )
        # What the last scrape kept (open files by path; listings by directory path, with
        # the directory's inode), and what the scrape under way is keeping.
        self._fds: dict[str, int] = {}
        self._next_fds: dict[str, int] = {}
        self._listings: dict[str, tuple[int, _Listing]] = {}
        self._next_listings: dict[str, tuple[int, _Listing]] = {}
        #: Files listed but gone by the time they were opened (a port going away).
        self._files_gone = 0
        #: Devices and values skipped as unusable, by reason (see the module's docstring).
        self.errors = ErrorCounts()
        #: Counter files of the scrape under way that hold no integer.
        self._unusable: set[str] = set()

    def close(self) -> None:
        """Closes the files held open; a later :meth:`read` opens them again. A read stuck
        in the kernel holds the lock: then the files are left to the process's exit, and
        closing does not wait (the agent stops within its deadline, not when sysfs answers)."""
        if not self._lock.acquire(timeout=_CLOSE_WAIT_SECONDS):
            logger.warning("ib files left open: a sysfs read is stuck")
            return
        try:
            for fd in self._fds.values():
                os.close(fd)
            self._fds, self._listings = {}, {}
        finally:
            self._lock.release()

    def read(self) -> list[IbPortReading]:
        """One reading per port, sorted by device then port number; ``[]`` without IB.

        Raises :class:`SourceError` only when ``class/infiniband`` exists but cannot be listed.
        """
        with self._lock:
            self._next_fds, self._next_listings = {}, {}
            self._unusable = set()
            try:
                return self._read_all()
            finally:  # drop what this scrape did not use: its port or counter is gone
                for fd in self._fds.values():
                    os.close(fd)
                self._fds, self._next_fds = self._next_fds, {}
                self._listings, self._next_listings = self._next_listings, {}

    def _read_all(self) -> list[IbPortReading]:
        try:
            with os.scandir(self._class_dir) as it:
                devices = [(entry.name, entry.path) for entry in it]
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise SourceError(f"cannot list {self._class_dir}: {exc.strerror or exc}") from exc
        readings: list[IbPortReading] = []
        for device, device_path in devices:
            if not _utf8(device):
                self._skipped("name_not_utf8", f"device={device!r}")
                continue
            try:
                with os.scandir(device_path + "/ports") as it:
                    ports = [(entry.name, entry.path) for entry in it]
            except OSError as exc:  # device removed since listing, or no ports/ at all
                logger.debug("ib device skipped device=%s reason=%s", device, exc.strerror or exc)
                continue
            for port, port_path in ports:
                if not _utf8(port):
                    self._skipped("name_not_utf8", f"device={device} port={port!r}")
                    continue
                reading = self._read_port(device, port, port_path)
                if reading is not None:
                    readings.append(reading)
        readings.sort(key=_port_sort_key)
        return readings

    def _skipped(self, reason: str, what: str) -> None:
        """Count one unusable device or value (logged at debug: it recurs every scrape)."""
        self.errors.add(self.name, reason)
        logger.debug("ib value skipped %s reason=%s", what, reason)

    def _read(self, path: str) -> bytes:
        """The content of one file, kept open for the next scrape; raises ``OSError``."""
        fd = self._fds.pop(path, None)
        if fd is None:  # maybe read already this scrape, before its directory was re-listed
            fd = self._next_fds.pop(path, None)
        if fd is not None:  # the hot path: re-read a file held open since the last scrape
            try:
                raw = os.pread(fd, _READ_SIZE, 0)
            except OSError:  # ENODEV: the file was removed (maybe replaced): reopen it
                os.close(fd)
            else:
                self._next_fds[path] = fd
                return raw
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except FileNotFoundError:
            self._files_gone += 1
            raise
        try:
            raw = os.pread(fd, _READ_SIZE, 0)
        except OSError:  # EINVAL from some drivers, EIO, EISDIR...
            os.close(fd)
            raise
        if len(self._next_fds) < self._max_open:
            self._next_fds[path] = fd
        else:
            os.close(fd)
        return raw

    def _read_text(self, path: str) -> str:
        """A text attribute stripped of whitespace; ``""`` if unreadable or empty."""
        try:
            return self._read(path).decode("utf-8", "replace").strip()
        except OSError as exc:
            logger.debug("ib file skipped path=%s reason=%s", path, exc.strerror or exc)
            return ""

    def _read_counters(self, path: str, inode: int, keep: Callable[[str], bool]) -> _Counters:
        """The integer files of one counter directory whose name ``keep`` accepts.

        ``None`` means the directory vanished after its port was listed (the port is gone);
        an unreadable directory gives ``{}``.
        """
        cached = self._listings.pop(path, None)
        listing = cached[1] if cached is not None and cached[0] == inode else None
        if listing is not None:
            self._next_listings[path] = (inode, listing)
            values = self._read_ints(listing, from_cache=True)
            if values is not None:
                return values
        try:  # not listed yet, or a file of the cached listing has gone: list it (again)
            with os.scandir(path) as it:
                listing = tuple((entry.name, entry.path) for entry in it if keep(entry.name))
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.debug("ib directory skipped path=%s reason=%s", path, exc.strerror or exc)
            return {}
        self._next_listings[path] = (inode, listing)
        return self._read_ints(listing, from_cache=False)

    def _read_ints(self, listing: _Listing, from_cache: bool) -> _Counters:
        """The integer value of each listed file that has one; ``None`` if a cached file is gone."""
        read = self._read
        values: dict[str, int] = {}
        for name, path in listing:
            try:
                raw = read(path)
            except OSError as exc:
                if from_cache and isinstance(exc, FileNotFoundError):
                    return None
                logger.debug("ib file skipped path=%s reason=%s", path, exc.strerror or exc)
                continue
            try:
                value = int(raw)  # int() takes bytes and ignores surrounding whitespace
            except ValueError:
                self._unusable.add(path)
                reason = _not_an_integer(raw)
                if reason:
                    self._skipped(reason, f"path={path} content={raw[:40]!r}")
                continue
            if 0 <= value <= _U64_MAX:
                values[name] = value
            else:
                self._skipped("negative" if value < 0 else "out_of_range", f"path={path}")
        return values

    def _read_port(self, device: str, port: str, path: str) -> IbPortReading | None:
        """One port, or ``None`` if it vanished (or cannot be listed) while being read."""
        try:
            with os.scandir(path) as it:
                present = {entry.name: entry.inode() for entry in it}
        except OSError as exc:
            logger.debug(
                "ib port skipped device=%s port=%s reason=%s", device, port, exc.strerror or exc
            )
            return None
        if not present:  # emptied while being listed
            return None
        files_gone = self._files_gone
        found: dict[str, dict[str, int]] = {}
        for subdir, keep in _COUNTER_DIRS:
            if subdir in present:
                values = self._read_counters(f"{path}/{subdir}", present[subdir], keep)
                if values is None:  # vanished after the port was listed
                    logger.debug("ib port skipped device=%s port=%s reason=vanished", device, port)
                    return None
                found[subdir] = values
        counters, ext, hw = (found.get(subdir, {}) for subdir, _ in _COUNTER_DIRS)

        text = self._read_text
        state = _after_colon(text(path + "/state")) if "state" in present else ""
        phys = _after_colon(text(path + "/phys_state")) if "phys_state" in present else ""
        rate, rate_problem = _parse_rate(text(path + "/rate")) if "rate" in present else (None, "")
        link_layer = text(path + "/link_layer") if "link_layer" in present else ""
        if self._files_gone != files_gone and not os.path.isdir(path):
            logger.debug("ib port skipped device=%s port=%s reason=vanished", device, port)
            return None
        garbage = {name for name in _EXT_TWINS if f"{path}/counters/{name}" in self._unusable}
        tx_bytes, tx_saturated, tx_problem = _words_to_bytes(
            ext, counters, "port_xmit_data", garbage
        )
        rx_bytes, rx_saturated, rx_problem = _words_to_bytes(
            ext, counters, "port_rcv_data", garbage
        )
        tx_packets, tx_packets_problem = _prefer_64(ext, counters, "port_xmit_packets", garbage)
        rx_packets, rx_packets_problem = _prefer_64(ext, counters, "port_rcv_packets", garbage)
        problems = (rate_problem, tx_problem, rx_problem, tx_packets_problem, rx_packets_problem)
        for problem in problems:
            if problem:
                self._skipped(problem, f"device={device} port={port}")
        return IbPortReading(
            device=device,
            port=port,
            link_layer=link_layer,
            state=state,
            phys_state=phys,
            up=(state == "ACTIVE") if state else None,
            rate_bytes_per_second=rate,
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


__all__ = ["SysfsIbSource", "parse_rate"]
