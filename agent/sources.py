"""The narrow interfaces between the agent's sources and its exposition.

Each source has a real implementation and a simulated one, passed in through constructors.
A source raises :class:`gpuscope.errors.SourceError` (or anything else) when it cannot read
at all; the exposition then reports it down and goes on with the others. A problem with one
device (a GPU lost from the bus, an unreadable port) is reported inside the readings instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gpuscope.records import GpuReading, GpuWorkload, IbPortReading


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
