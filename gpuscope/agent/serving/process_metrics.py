"""The agent's own ``process_*`` series (memory, CPU, file descriptors), read from procfs.

The same families, help texts and values that prometheus_client's ``ProcessCollector``
exports (which the page had before it was written directly), so dashboards and alerts on
the agent's own memory keep working; read here so the agent needs no prometheus_client.
Off Linux (no ``/proc/self``) they are left out, as that collector leaves them out.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpuscope.agent.serving.page import FamilySpec, Samples

PROCESS_FAMILIES: tuple[FamilySpec, ...] = (
    FamilySpec("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", ()),
    FamilySpec("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", ()),
    FamilySpec(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
        (),
    ),
    FamilySpec(
        "process_cpu_seconds", "counter", "Total user and system CPU time spent in seconds.", ()
    ),
    FamilySpec("process_open_fds", "gauge", "Number of open file descriptors.", ()),
    FamilySpec("process_max_fds", "gauge", "Maximum number of open file descriptors.", ()),
)


class ProcessMetrics:
    """Reads this process's procfs entries on each scrape (``proc``: the procfs root).

    ``stat`` and ``limits`` are kept open and re-read from offset 0 (procfs writes them
    afresh on each read), which makes them a few microseconds a scrape.
    """

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self._fd_dir = str(proc / "self" / "fd")
        self._ticks = float(os.sysconf("SC_CLK_TCK"))
        self._page = float(os.sysconf("SC_PAGE_SIZE"))
        self._btime = 0.0
        self._stat = self._limits = -1
        try:
            for line in (proc / "stat").read_bytes().splitlines():
                if line.startswith(b"btime "):
                    self._btime = float(line.split()[1])
                    break
            self._stat = os.open(proc / "self" / "stat", os.O_RDONLY | os.O_CLOEXEC)
            self._limits = os.open(proc / "self" / "limits", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            pass

    def read(self) -> dict[str, Samples]:
        """Family name -> its one sample; families it cannot read are absent."""
        out: dict[str, Samples] = {}
        if not self._btime or self._stat < 0:
            return out
        try:
            parts = os.pread(self._stat, 4096, 0).rsplit(b")", 1)[-1].split()
        except OSError:
            return out
        out["process_virtual_memory_bytes"] = [((), float(parts[20]))]
        out["process_resident_memory_bytes"] = [((), float(parts[21]) * self._page)]
        out["process_start_time_seconds"] = [((), float(parts[19]) / self._ticks + self._btime)]
        # user and system time each in seconds, then summed: the same float as before
        cpu = float(parts[11]) / self._ticks + float(parts[12]) / self._ticks
        out["process_cpu_seconds"] = [((), cpu)]
        try:
            limits = os.pread(self._limits, 8192, 0)
            max_fds = next(
                float(line.split()[3])
                for line in limits.splitlines()
                if line.startswith(b"Max open file")
            )
            open_fds = float(self._open_fds())
        except (OSError, StopIteration, IndexError, ValueError):
            return out
        out["process_open_fds"] = [((), open_fds)]
        out["process_max_fds"] = [((), max_fds)]
        return out

    def _open_fds(self) -> int:
        """Open descriptors. Linux 6.2 and later give the count as the size of the fd
        directory, a few microseconds; listing it (what older kernels need, and what
        prometheus_client did) costs ~0.2 ms with the ~400 sysfs files the InfiniBand
        source keeps open. A listing counts its own descriptor too, the size does not."""
        size = os.stat(self._fd_dir).st_size
        return size if size > 0 else len(os.listdir(self._fd_dir))

    def close(self) -> None:
        for fd in (self._stat, self._limits):
            if fd >= 0:
                os.close(fd)
        self._stat = self._limits = -1
