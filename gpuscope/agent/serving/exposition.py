"""Exposition: turn the sources' readings into the agent's page.

One scrape reads every source afresh (:meth:`AgentCollector.samples`) and writes the page
straight from the series (:meth:`AgentCollector.render`, through
:mod:`gpuscope.agent.serving.page`); no prometheus_client object is built per series. ``collect()``
still yields prometheus_client families, for code that registers the collector in a registry (tests,
the demo).

Sources run in worker threads with a timeout, so one slow or failing source (a hung NVML
call, a stalled kubelet socket) shows as ``gpuscope_agent_source_up 0`` while the others
are still exported. Attribution failing never fails a scrape: the GPU series go out
without workload series.

No value fails the page either. Each reading's series are built on their own, and each
series is checked before it goes out: a reading that cannot be turned into series (an
integer too large for a float), a value that is NaN or infinite, a counter below 0 or past
2**64, or a label value that is not UTF-8 is dropped and counted in
``gpuscope_agent_errors_total{source,reason}``, beside what the sources count themselves.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from gpuscope import __version__
from gpuscope.agent.devices.sources import (
    CountsErrors,
    ErrorCounts,
    GpuSource,
    IbSource,
    WorkloadAttributor,
)
from gpuscope.agent.serving.page import FamilySpec, PageWriter, Samples
from gpuscope.agent.serving.process_metrics import PROCESS_FAMILIES, ProcessMetrics
from gpuscope.core.catalogue import AGENT_METRICS
from gpuscope.core.records import GpuReading, GpuWorkload, IbPortReading
from gpuscope.core.series import Series, gpu_series, port_series, workload_series

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SourceResult:
    """What one source gave in one scrape."""

    source: str
    ok: bool
    seconds: float
    error: str = ""


_COUNTERS = frozenset(spec.name for spec in AGENT_METRICS if spec.type == "counter")
#: The largest value a counter may take (every counter the agent reads is 64-bit at most).
_COUNTER_MAX = float(1 << 64)


def unusable(name: str, labels: list[str], value: float) -> str:
    """Why a series cannot go out ("" if it can): the reason it is counted under."""
    if not math.isfinite(value):
        return "not_finite"
    if name in _COUNTERS:
        if value < 0:
            return "negative"
        if value >= _COUNTER_MAX:
            return "out_of_range"
    joined = "".join(labels)
    if not joined.isascii():
        try:
            joined.encode("utf-8")
        except UnicodeEncodeError:  # a name read from sysfs or procfs that is not UTF-8
            return "label_not_utf8"
    return ""


#: The page's families in page order: the catalogue's, then the process's own.
AGENT_FAMILIES: tuple[FamilySpec, ...] = tuple(
    FamilySpec(spec.name, spec.type, spec.help, spec.labels) for spec in AGENT_METRICS
)


class _Guarded:
    """Runs one source's calls in a thread of their own, never two at once, with a
    deadline. Each call gets a fresh daemon thread (not a pool's worker): a read stuck in
    the kernel (a FIFO, a hung driver file) is abandoned at its deadline and can never hold
    up the agent's exit, which the standard pool's exit hook would by joining its workers.
    While a stuck call lasts, the source reads as down ("previous read still running")."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._pending: threading.Thread | None = None

    def call(self, fn: Callable[[], T], timeout: float) -> tuple[T | None, SourceResult]:
        start = time.perf_counter()
        if self._pending is not None and self._pending.is_alive():
            return None, SourceResult(self.name, False, 0.0, "previous read still running")
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = fn()
            except BaseException as exc:  # handed to the caller below
                box["error"] = exc

        thread = threading.Thread(target=run, name=f"src-{self.name}", daemon=True)
        self._pending = thread
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            log.warning("source timed out source=%s timeout_s=%s", self.name, timeout)
            return None, SourceResult(self.name, False, time.perf_counter() - start, "timeout")
        if "error" in box:
            exc = box["error"]
            log.warning("source failed source=%s error=%s", self.name, exc)
            return None, SourceResult(self.name, False, time.perf_counter() - start, str(exc))
        value: T = box["value"]
        return value, SourceResult(self.name, True, time.perf_counter() - start)

    def shutdown(self) -> None:
        """Nothing to wait for: a call still running is a daemon thread, left behind."""


class AgentCollector:
    """The agent's one collector: reads every source and writes the page from the series."""

    def __init__(
        self,
        node: str,
        gpu_source: GpuSource | None,
        ib_source: IbSource | None = None,
        attributor: WorkloadAttributor | None = None,
        *,
        timeout_seconds: float = 2.0,
    ) -> None:
        self.node = node
        self.gpu_source = gpu_source
        self.ib_source = ib_source
        self.attributor = attributor
        self.timeout_seconds = timeout_seconds
        self._guards = {
            name: _Guarded(name)
            for name, src in (
                ("gpu", gpu_source),
                ("infiniband", ib_source),
                ("attribution", attributor),
            )
            if src is not None
        }
        self.last_results: tuple[SourceResult, ...] = ()
        #: Readings and series the exposition dropped, by source and reason.
        self.errors = ErrorCounts()
        self._page = PageWriter((*AGENT_FAMILIES, *PROCESS_FAMILIES))

    def describe(self) -> list[Metric]:
        # Declaring no families up front keeps registration from calling collect().
        return []

    def read(
        self,
    ) -> tuple[
        Sequence[GpuReading], Sequence[GpuWorkload], Sequence[IbPortReading], list[SourceResult]
    ]:
        """Read every source once (with deadlines); failed sources give nothing."""
        results: list[SourceResult] = []
        gpus: Sequence[GpuReading] = ()
        workloads: Sequence[GpuWorkload] = ()
        ports: Sequence[IbPortReading] = ()
        if self.gpu_source is not None:
            got, res = self._guards["gpu"].call(self.gpu_source.read, self.timeout_seconds)
            gpus = got or ()
            results.append(_renamed(res, self.gpu_source.name))
        if self.attributor is not None:
            attributor = self.attributor
            live = gpus
            got_w, res = self._guards["attribution"].call(
                lambda: attributor.attribute(live), self.timeout_seconds
            )
            workloads = got_w or ()
            results.append(res)
        if self.ib_source is not None:
            got_p, res = self._guards["infiniband"].call(self.ib_source.read, self.timeout_seconds)
            ports = got_p or ()
            results.append(res)
        return gpus, workloads, ports, results

    def samples(self) -> dict[str, Samples]:
        """One scrape's series, by family (catalogue names): every source read afresh,
        each series checked (what cannot go out is dropped and counted)."""
        gpus, workloads, ports, results = self.read()
        self.last_results = tuple(results)
        fams: dict[str, Samples] = {spec.name: [] for spec in AGENT_METRICS}
        node = self.node
        gpu_name = self.gpu_source.name if self.gpu_source is not None else "gpu"
        for g in gpus:
            self._add(fams, gpu_name, partial(gpu_series, node, g))
        by_uuid = {g.uuid: g for g in gpus}
        for w in workloads:
            self._add(fams, "attribution", partial(workload_series, node, w, by_uuid))
        ib_name = self.ib_source.name if self.ib_source is not None else "infiniband"
        for p in ports:
            self._add(fams, ib_name, partial(port_series, node, p))
        errors = fams["gpuscope_agent_errors"]
        for source, reason, count in self._error_counts():
            errors.append(((node, source, reason), float(count)))
        up = fams["gpuscope_agent_source_up"]
        took = fams["gpuscope_agent_collect_seconds"]
        for r in results:
            up.append(((node, r.source), 1.0 if r.ok else 0.0))
            took.append(((node, r.source), float(r.seconds)))
        source_name = self.gpu_source.name if self.gpu_source is not None else "none"
        fams["gpuscope_agent_info"].append(((node, __version__, source_name), 1.0))
        return fams

    def render(self, *, openmetrics: bool = False, process: ProcessMetrics | None = None) -> bytes:
        """One scrape's page (text 0.0.4, or OpenMetrics), with the process's own series
        after the catalogue's when ``process`` is given."""
        fams = self.samples()
        if process is not None:
            fams.update(process.read())
        return self._page.render(fams, openmetrics=openmetrics)

    def collect(self) -> Iterator[Metric]:
        """The same series as prometheus_client families (for a registry; slower)."""
        from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

        fams = self.samples()
        for spec in AGENT_METRICS:
            got = fams[spec.name]
            if not got:
                continue
            kind = CounterMetricFamily if spec.type == "counter" else GaugeMetricFamily
            fam = kind(spec.name, spec.help, labels=spec.labels)
            for labels, value in got:
                fam.add_metric(list(labels), value)
            yield fam

    def _add(
        self, fams: dict[str, Samples], source: str, series: Callable[[], Iterator[Series]]
    ) -> None:
        """One reading's series, each checked; a reading or series that cannot go out is
        dropped and counted, never failing the page."""
        try:
            items = list(series())
        except Exception as exc:  # e.g. OverflowError: an integer too large for a float
            self.errors.add(source, "bad_reading")
            log.warning("reading dropped source=%s error=%s", source, exc)
            return
        for name, labels, value in items:
            # the common case inline (a scrape has hundreds of series): finite (inf - inf
            # and NaN - NaN are NaN), a counter in range, ASCII labels
            if (
                value - value == 0.0
                and (0.0 <= value < _COUNTER_MAX or name not in _COUNTERS)
                and "".join(labels).isascii()
            ):
                fams[name].append((labels, float(value)))
                continue
            reason = unusable(name, labels, value)
            if reason:
                self.errors.add(source, reason)
                log.debug("series dropped source=%s metric=%s reason=%s", source, name, reason)
            else:
                fams[name].append((labels, float(value)))

    def _error_counts(self) -> list[tuple[str, str, int]]:
        """The exposition's own counts and those of every source that counts what it skips."""
        tallies = [self.errors]
        sources: tuple[object, ...] = (self.gpu_source, self.ib_source, self.attributor)
        for src in sources:
            if isinstance(src, CountsErrors):
                tallies.append(src.errors)
        total: dict[tuple[str, str], int] = {}
        for tally in tallies:
            for source, reason, n in tally.items():
                total[source, reason] = total.get((source, reason), 0) + n
        return sorted((src, reason, n) for (src, reason), n in total.items())

    def close(self) -> None:
        for guard in self._guards.values():
            guard.shutdown()
        for source in (self.gpu_source, self.ib_source):
            close = getattr(source, "close", None)
            if close is None:
                continue
            try:
                close()
            except Exception as exc:  # closing must not mask the reason we stop
                log.debug("closing source failed source=%s error=%s", source, exc)


def _renamed(res: SourceResult, name: str) -> SourceResult:
    return SourceResult(name, res.ok, res.seconds, res.error)
