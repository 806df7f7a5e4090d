"""The narrow interfaces between the agent's sources and its exposition.

Each source has a real implementation and a simulated one, passed in through constructors.
A source raises :class:`gpuscope.core.errors.SourceError` (or anything else) when it cannot read
at all; the exposition then reports it down and goes on with the others. A problem with one
device (a GPU lost from the bus, an unreadable port) is reported inside the readings instead.
A device or value a source skips as unusable (a name that is not UTF-8, a counter past 2**64)
is counted in its :class:`ErrorCounts`, which the exposition exports as
``gpuscope_agent_errors_total{source,reason}``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from gpuscope.core.records import GpuReading, GpuWorkload, IbPortReading


class GpuSource(Protocol):
    """Yields one reading per GPU (and per MIG instance) of this node."""

    name: str

    def read(self) -> Sequence[GpuReading]: ...

    def close(self) -> None: ...


class IbSource(Protocol):
    """Yields one reading per InfiniBand port of this node."""

    name: str

    def read(self) -> Sequence[IbPortReading]: ...


class WorkloadAttributor(Protocol):
    """Maps the GPUs just read to the pods that hold or use them."""

    name: str

    def attribute(self, gpus: Sequence[GpuReading]) -> Sequence[GpuWorkload]: ...


class ErrorCounts:
    """How many devices or values were skipped, by (source, reason), since the agent started.

    Cumulative (a Prometheus counter) and thread-safe: sources add from their worker
    threads while a scrape reads.
    """

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def add(self, source: str, reason: str, n: int = 1) -> None:
        with self._lock:
            self._counts[source, reason] += n

    def items(self) -> list[tuple[str, str, int]]:
        """``(source, reason, count)`` sorted by source then reason."""
        with self._lock:
            return sorted((src, reason, n) for (src, reason), n in self._counts.items())


@runtime_checkable
class CountsErrors(Protocol):
    """A source that counts what it skips (the exposition exports these counts)."""

    errors: ErrorCounts
