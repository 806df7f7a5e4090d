"""Exposition: turn the sources' readings into Prometheus metric families.

A prometheus-client custom collector: one ``collect()`` reads every source afresh and
yields new families built from the metric catalogue. Sources run in worker threads with a
timeout, so one slow or failing source (a hung NVML call, a stalled kubelet socket) shows
as ``gpuscope_agent_source_up 0`` while the others are still exported. Attribution failing
never fails a scrape: the GPU series go out without workload series.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from agent.sources import GpuSource, IbSource, WorkloadAttributor
from gpuscope import __version__
from gpuscope.catalogue import AGENT_METRICS, MetricSpec
from gpuscope.records import GpuReading, GpuWorkload, IbPortReading
from gpuscope.series import node_series

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SourceResult:
    """What one source gave in one scrape."""

    source: str
    ok: bool
    seconds: float
    error: str = ""


_Fam = GaugeMetricFamily | CounterMetricFamily


def _family(spec: MetricSpec) -> _Fam:
    if spec.type == "counter":
        return CounterMetricFamily(spec.name, spec.help, labels=spec.labels)
    return GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)


class _Guarded:
    """Runs one source's calls in its own thread, never two at once, with a deadline."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"src-{name}")
        self._pending: Future[object] | None = None

    def call(self, fn: Callable[[], T], timeout: float) -> tuple[T | None, SourceResult]:
        start = time.perf_counter()
        if self._pending is not None and not self._pending.done():
            return None, SourceResult(self.name, False, 0.0, "previous read still running")
        future: Future[T] = self._pool.submit(fn)
        self._pending = future  # type: ignore[assignment]
        try:
            value = future.result(timeout=timeout)
        except FutureTimeout:
            log.warning("source timed out source=%s timeout_s=%s", self.name, timeout)
            return None, SourceResult(self.name, False, time.perf_counter() - start, "timeout")
        except Exception as exc:
            log.warning("source failed source=%s error=%s", self.name, exc)
            return None, SourceResult(self.name, False, time.perf_counter() - start, str(exc))
        return value, SourceResult(self.name, True, time.perf_counter() - start)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class AgentCollector(Collector):
    """The agent's one collector: reads every source and yields fresh families."""

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

    def collect(self) -> Iterator[Metric]:
        gpus, workloads, ports, results = self.read()
        self.last_results = tuple(results)
        fams = {spec.name: _family(spec) for spec in AGENT_METRICS}
        node = self.node
        for name, labels, value in node_series(node, gpus, workloads, ports):
            fams[name].add_metric(labels, value)
        up = fams["gpuscope_agent_source_up"]
        took = fams["gpuscope_agent_collect_seconds"]
        for r in results:
            up.add_metric([node, r.source], 1.0 if r.ok else 0.0)
            took.add_metric([node, r.source], r.seconds)
        source_name = self.gpu_source.name if self.gpu_source is not None else "none"
        fams["gpuscope_agent_info"].add_metric([node, __version__, source_name], 1.0)
        for fam in fams.values():
            if fam.samples:
                yield fam

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
