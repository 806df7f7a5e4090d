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

The source degrades per port, never as a whole. Each port is read with its own state and
lock (gpuscope/agent/devices/ib_port.py) by a reader thread the source watches: a read that
makes no progress for ``stall_seconds`` (a FIFO, a hung driver file: a read that never
returns) leaves its port to that thread and the source goes on with the next ports in a
new one, so the other ports are exported in the same scrape. The stuck port is shown as
``gpuscope_ib_port_unreadable_files{reason="stuck"} 1`` with no other series (never zeros),
and skipped at once while its read still hangs; ``gpuscope_agent_errors_total{source=
"infiniband",reason="read_stuck"}`` counts it. A counter file that cannot be read (a FIFO,
whose read fails, a permission, ``EIO``) gives no value and is counted on its port
(``gpuscope_ib_port_unreadable_files{reason="unreadable"}``, and ``reason="unreadable"`` in
the agent's errors), where it used to disappear silently.

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
from dataclasses import dataclass, field
from pathlib import Path

from gpuscope.agent.devices.ib_port import STUCK, PortFiles
from gpuscope.agent.devices.ib_values import parse_rate
from gpuscope.agent.devices.sources import ErrorCounts
from gpuscope.core.errors import SourceError
from gpuscope.core.records import IbPortReading

logger = logging.getLogger(__name__)

#: Files kept open between scrapes at most (8 ports need ~360; never over a quarter of the
#: process's file limit); more are opened and closed on each read.
_MAX_OPEN_FILES = 1024
#: How long :meth:`SysfsIbSource.close` waits for a read under way.
_CLOSE_WAIT_SECONDS = 1.0
#: A port read that makes no progress (no file read returns) this long is stuck: a file
#: read takes microseconds, and the agent's deadline for the whole source is 2 s.
STALL_SECONDS = 0.4


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


_Port = tuple[str, str, str]  # (device, port, path)


@dataclass(eq=False)
class _Job:
    """Ports one reader thread reads in turn, and what it has read."""

    ports: list[_Port]
    readings: list[IbPortReading] = field(default_factory=list)
    #: The port being read, or the next one (an index into ``ports``).
    at: int = 0
    #: Files read so far: the source watches it for a read that never returns.
    files: int = 0
    abandoned: bool = False
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def step(self) -> None:
        self.files += 1

    def given_up(self) -> bool:
        """Whether the source left this job's thread to a stuck read (call under lock)."""
        return self.abandoned


class SysfsIbSource:
    """Reads every InfiniBand port of this node from sysfs (an :class:`IbSource`).

    Holds files open between calls to :meth:`read`; :meth:`close` releases them. Made for
    sysfs: on a plain file system (tests), a counter file added to a directory already
    listed is not seen, and a deleted file that is still held open keeps its last value.
    """

    def __init__(
        self, sysfs_root: Path, name: str = "infiniband", *, stall_seconds: float = STALL_SECONDS
    ) -> None:
        self.name = name
        self.sysfs_root = sysfs_root
        self.stall_seconds = stall_seconds
        self._class_dir = os.path.join(os.fspath(sysfs_root), "class", "infiniband")
        self._lock = threading.Lock()
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self._max_open = (
            _MAX_OPEN_FILES if soft_limit < 0 else min(_MAX_OPEN_FILES, soft_limit // 4)
        )
        #: Each port's files and lock, by (device, port).
        self._ports: dict[tuple[str, str], PortFiles] = {}
        #: Devices and values skipped as unusable, by reason (see the module's docstring).
        self.errors = ErrorCounts()

    def close(self) -> None:
        """Closes the files held open; a later :meth:`read` opens them again. A read stuck
        in the kernel holds its port's lock: that port's files are left to the process's
        exit, and closing does not wait (the agent stops within its deadline, not when
        sysfs answers)."""
        if not self._lock.acquire(timeout=_CLOSE_WAIT_SECONDS):
            logger.warning("ib files left open: a sysfs read is stuck")
            return
        try:
            for files in self._ports.values():
                if files.lock.acquire(blocking=False):
                    try:
                        files.close()
                    finally:
                        files.lock.release()
                else:
                    logger.warning("ib port files left open: a sysfs read is stuck")
            self._ports = {}
        finally:
            self._lock.release()

    def read(self) -> list[IbPortReading]:
        """One reading per port, sorted by device then port number; ``[]`` without IB.

        Raises :class:`SourceError` only when ``class/infiniband`` exists but cannot be listed.
        """
        with self._lock:
            ports = self._list_ports()
            wanted = {(device, port) for device, port, _ in ports}
            for key in [k for k in self._ports if k not in wanted]:  # ports gone
                files = self._ports.pop(key)
                if files.lock.acquire(blocking=False):  # else its stuck reader keeps them
                    try:
                        files.close()
                    finally:
                        files.lock.release()
            per_port = max(8, self._max_open // max(1, len(ports)))
            for device, port, _ in ports:
                self._ports.setdefault((device, port), PortFiles()).max_open = per_port
            readings = self._read_ports(ports)
        readings.sort(key=_port_sort_key)
        return readings

    def _list_ports(self) -> list[_Port]:
        try:
            with os.scandir(self._class_dir) as it:
                devices = [(entry.name, entry.path) for entry in it]
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise SourceError(f"cannot list {self._class_dir}: {exc.strerror or exc}") from exc
        out: list[_Port] = []
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
                out.append((device, port, port_path))
        return out

    def _read_ports(self, ports: list[_Port]) -> list[IbPortReading]:
        """Every port's reading, each read in a reader thread watched for progress: a port
        whose read makes none for ``stall_seconds`` is left to its thread (stuck), and the
        ports after it are read by a new one."""
        out: list[IbPortReading] = []
        todo = ports
        while todo:
            job = _Job(list(todo))
            threading.Thread(target=self._run, args=(job,), name="ib-ports", daemon=True).start()
            while True:
                seen = job.files
                if job.done.wait(self.stall_seconds) or job.files == seen:
                    break
            with job.lock:
                job.abandoned = not job.done.is_set()
                out.extend(job.readings)
                at = job.at
            if job.error is not None:
                raise job.error
            if not job.abandoned or at >= len(todo):  # done (maybe just now)
                break
            device, port, _ = todo[at]
            logger.warning(
                "ib port read stuck; the other ports go on device=%s port=%s", device, port
            )
            out.append(self._stuck(device, port))
            todo = todo[at + 1 :]
        return out

    def _run(self, job: _Job) -> None:
        """A reader thread: the job's ports in turn, each under its own lock; a port whose
        lock a stuck read holds is reported stuck at once."""
        try:
            for i, (device, port, path) in enumerate(job.ports):
                with job.lock:
                    if job.given_up():
                        return
                    job.at = i
                files = self._ports[(device, port)]
                if not files.lock.acquire(blocking=False):  # an earlier read still hangs
                    reading: IbPortReading | None = self._stuck(device, port)
                else:
                    try:
                        files.progress = job.step
                        reading = files.read(device, port, path, self._skipped)
                    finally:
                        files.lock.release()
                job.step()
                with job.lock:
                    if job.given_up():  # given up on meanwhile: its reading is not used
                        return
                    if reading is not None:
                        job.readings.append(reading)
                    job.at = i + 1
        except BaseException as exc:  # handed to the scrape (a bug, not a port's fault)
            job.error = exc
        finally:
            job.done.set()

    def _stuck(self, device: str, port: str) -> IbPortReading:
        self._skipped("read_stuck", f"device={device} port={port}")
        return IbPortReading(device=device, port=port, unreadable=((STUCK, 1),), stuck=True)

    def _skipped(self, reason: str, what: str) -> None:
        """Count one unusable device or value (logged at debug: it recurs every scrape)."""
        self.errors.add(self.name, reason)
        logger.debug("ib value skipped %s reason=%s", what, reason)


__all__ = ["SysfsIbSource", "parse_rate"]
