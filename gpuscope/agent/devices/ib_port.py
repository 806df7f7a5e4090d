"""One InfiniBand port's files, read from sysfs: what :class:`~gpuscope.agent.devices.
infiniband.SysfsIbSource` reads for each port (that module's docstring says why the unit,
width and error handling are as they are).

Each port has its own state (:class:`PortFiles`: the files kept open between scrapes, its
counter directories' listings, what the scrape under way found unusable) and its own lock,
held while the port is read: a read stuck in the kernel holds only its own port, whose
later scrapes find the lock taken and skip the port (counted), while the node's other ports
are read as usual. A file that cannot be read (a FIFO planted in the tree, a permission, an
``EIO``) gives no value and is counted on its port (``unreadable``), never silently dropped.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Callable

from gpuscope.agent.devices.ib_values import (
    _after_colon,
    _not_an_integer,
    _parse_rate,
    _prefer_64,
    _words_to_bytes,
)
from gpuscope.core.records import IbPortReading

logger = logging.getLogger(__name__)

#: sysfs counters are unsigned 64-bit integers; a value past this is not a counter reading.
_U64_MAX = (1 << 64) - 1
#: Largest sysfs attribute (one page); a single read returns the whole value.
_READ_SIZE = 4096
#: ``O_NONBLOCK``: opening a FIFO planted in the tree does not wait for a writer (its
#: read then fails with ESPIPE and the file is counted unreadable); no effect on sysfs.
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
#: Counts one unusable value: (reason, what) -> None (the source's error counts).
Skipped = Callable[[str, str], None]

#: Why a port's file gave no value, as the per-port label: an error on open or read.
UNREADABLE = "unreadable"
#: A read of the port that has not returned (the port is skipped while it lasts).
STUCK = "stuck"


class PortFiles:
    """One port's files held open between scrapes, its counter directories' listings (with
    the directory's inode), and the lock a read of the port holds."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fds: dict[str, int] = {}
        self.listings: dict[str, tuple[int, _Listing]] = {}
        self._next_fds: dict[str, int] = {}
        self._next_listings: dict[str, tuple[int, _Listing]] = {}
        #: Files listed but gone by the time they were opened (the port going away).
        self._files_gone = 0
        #: Counter files of the scrape under way that hold no integer.
        self._unusable: set[str] = set()
        #: Files of the scrape under way that could not be read, by reason.
        self._unreadable: Counter[str] = Counter()
        #: Called after each file read: the source watches it for a read that never returns.
        self.progress: Callable[[], None] = lambda: None
        #: The most files this port keeps open between scrapes.
        self.max_open = 128

    def close(self) -> None:
        """Closes the files held open (the caller holds ``lock``)."""
        for fd in (*self.fds.values(), *self._next_fds.values()):
            os.close(fd)
        self.fds, self._next_fds, self.listings = {}, {}, {}

    def read(self, device: str, port: str, path: str, skipped: Skipped) -> IbPortReading | None:
        """The port's reading (the caller holds ``lock``), or ``None`` if it vanished."""
        self._next_fds, self._next_listings = {}, {}
        self._unusable, self._unreadable = set(), Counter()
        try:
            return self._read_port(device, port, path, skipped)
        finally:  # drop what this scrape did not use: its counter is gone
            for fd in self.fds.values():
                os.close(fd)
            self.fds, self._next_fds = self._next_fds, {}
            self.listings, self._next_listings = self._next_listings, {}

    def _unreadable_file(self, path: str, exc: OSError, skipped: Skipped) -> None:
        self._unreadable[UNREADABLE] += 1
        skipped(UNREADABLE, f"path={path} error={exc.strerror or exc}")

    def _read(self, path: str) -> bytes:
        """The content of one file, kept open for the next scrape; raises ``OSError``."""
        fd = self.fds.pop(path, None)
        if fd is None:  # maybe read already this scrape, before its directory was re-listed
            fd = self._next_fds.pop(path, None)
        if fd is not None:  # the hot path: re-read a file held open since the last scrape
            try:
                raw = os.pread(fd, _READ_SIZE, 0)
            except OSError:  # ENODEV: the file was removed (maybe replaced): reopen it
                os.close(fd)
            else:
                self._next_fds[path] = fd
                self.progress()
                return raw
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except FileNotFoundError:
            self._files_gone += 1
            raise
        try:
            raw = os.pread(fd, _READ_SIZE, 0)
        except OSError:  # EINVAL from some drivers, EIO, EISDIR, ESPIPE (a FIFO)...
            os.close(fd)
            raise
        if len(self._next_fds) < self.max_open:
            self._next_fds[path] = fd
        else:
            os.close(fd)
        self.progress()
        return raw

    def _read_text(self, path: str, skipped: Skipped) -> str:
        """A text attribute stripped of whitespace; ``""`` if unreadable or empty."""
        try:
            return self._read(path).decode("utf-8", "replace").strip()
        except FileNotFoundError:
            return ""
        except OSError as exc:
            self._unreadable_file(path, exc, skipped)
            return ""

    def _read_counters(
        self, path: str, inode: int, keep: Callable[[str], bool], skipped: Skipped
    ) -> _Counters:
        """The integer files of one counter directory whose name ``keep`` accepts.

        ``None`` means the directory vanished after its port was listed (the port is gone);
        an unreadable directory gives ``{}`` (counted).
        """
        cached = self.listings.pop(path, None)
        listing = cached[1] if cached is not None and cached[0] == inode else None
        if listing is not None:
            self._next_listings[path] = (inode, listing)
            values = self._read_ints(listing, skipped, from_cache=True)
            if values is not None:
                return values
        try:  # not listed yet, or a file of the cached listing has gone: list it (again)
            with os.scandir(path) as it:
                listing = tuple((entry.name, entry.path) for entry in it if keep(entry.name))
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._unreadable_file(path, exc, skipped)
            return {}
        self._next_listings[path] = (inode, listing)
        return self._read_ints(listing, skipped, from_cache=False)

    def _read_ints(self, listing: _Listing, skipped: Skipped, from_cache: bool) -> _Counters:
        """The integer value of each listed file that has one; ``None`` if a cached file is gone."""
        read = self._read
        values: dict[str, int] = {}
        for name, path in listing:
            try:
                raw = read(path)
            except FileNotFoundError:
                if from_cache:
                    return None
                logger.debug("ib file skipped path=%s reason=gone", path)
                continue
            except OSError as exc:
                self._unreadable_file(path, exc, skipped)
                continue
            try:
                value = int(raw)  # int() takes bytes and ignores surrounding whitespace
            except ValueError:
                self._unusable.add(path)
                reason = _not_an_integer(raw)
                if reason:
                    skipped(reason, f"path={path} content={raw[:40]!r}")
                continue
            if 0 <= value <= _U64_MAX:
                values[name] = value
            else:
                skipped("negative" if value < 0 else "out_of_range", f"path={path}")
        return values

    def _read_port(
        self, device: str, port: str, path: str, skipped: Skipped
    ) -> IbPortReading | None:
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
                values = self._read_counters(f"{path}/{subdir}", present[subdir], keep, skipped)
                if values is None:  # vanished after the port was listed
                    logger.debug("ib port skipped device=%s port=%s reason=vanished", device, port)
                    return None
                found[subdir] = values
        counters, ext, hw = (found.get(subdir, {}) for subdir, _ in _COUNTER_DIRS)

        def text(name: str) -> str:
            return self._read_text(f"{path}/{name}", skipped) if name in present else ""

        state = _after_colon(text("state"))
        phys = _after_colon(text("phys_state"))
        rate, rate_problem = _parse_rate(text("rate")) if "rate" in present else (None, "")
        link_layer = text("link_layer")
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
                skipped(problem, f"device={device} port={port}")
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
            unreadable=tuple(sorted(self._unreadable.items())),
        )
