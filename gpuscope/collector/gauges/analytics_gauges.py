"""The analytics' headline numbers as gauges on the collector's ``/metrics``.

Grafana then needs only a Prometheus data source. Each detector's numeric summary value
``key`` becomes ``gpuscope_<detector>_<key>``; a summary entry that maps names to numbers
per entity (``{"projects": {"nlp": {"used_gpus": 64}}}``) becomes a gauge labelled by the
singular of its key (``gpuscope_quota_used_gpus{project="nlp"}``), or by the label
:data:`ENTITY_LABELS` names for it; a per-entity field whose name a top-level number of the
same summary already takes gets the label in its name (``gpuscope_fragmentation_pool_free_gpus
{pool="a100"}`` beside the cluster's ``gpuscope_fragmentation_free_gpus``), so one name never
carries two label sets. Open findings are counted by kind and severity in
``gpuscope_findings``, with the labels that route them (:data:`ROUTING_LABELS`) where a
finding has them; the findings :data:`FINDING_GAUGES` lists (idle sessions, idle
workloads) also give one series each, so a dashboard can list them with how long they have
lasted. Their count is bounded by the workloads holding GPUs, never by time.

A few summary keys would make names Prometheus's conventions reject (``promtool check
metrics``: a unit other than the base unit, ``_total`` on a gauge, the detector's name
twice); :data:`GAUGE_NAMES` gives those their gauge name and the factor to base units. The
summaries themselves (``gpuscope analyze --json``, the report) keep their keys.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from gpuscope.collector.gauges.topology_gauges import topology_gauges


class FindingLike(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def subject(self) -> Mapping[str, str]: ...
    @property
    def since(self) -> datetime | None: ...
    @property
    def evidence(self) -> Mapping[str, Any]: ...


class Summarised(Protocol):
    """What a detector's run gives (gpuscope.analytics.base.Analysis has this shape; the collector
    does not import analytics: layers point one way)."""

    @property
    def kinds(self) -> tuple[str, ...]: ...
    @property
    def findings(self) -> Sequence[FindingLike]: ...
    @property
    def summary(self) -> Mapping[str, Any]: ...


#: Labels for per-entity maps whose key is not the plural of a good label name.
ENTITY_LABELS: dict[tuple[str, str], str] = {
    ("fragmentation", "jobs_fit_now"): "job_gpus",
    ("fragmentation", "jobs_fit_packed"): "job_gpus",
    ("fragmentation", "node_free_gpus"): "node",
    ("fragmentation", "node_whole_free_gpus"): "node",
    ("fragmentation", "pending_blocked_by"): "reason",
}


#: Summary keys (top-level or per entity) whose gauge takes another name, and the factor
#: that converts the value to the name's base unit. docs/metrics.md lists the old names.
GAUGE_NAMES: dict[tuple[str, str], tuple[str, float]] = {
    ("idle", "idle_sessions"): ("sessions", 1.0),
    ("idle", "idle_gpus"): ("gpus", 1.0),
    ("idle", "idle_workloads"): ("noninteractive_workloads", 1.0),
    ("idle", "gpu_hours_wasted"): ("wasted_gpu_seconds", 3600.0),
    ("quota", "gpu_hours"): ("used_gpu_seconds", 3600.0),
    ("quota", "total_gpu_hours"): ("total_used_gpu_seconds", 3600.0),
    ("quota", "share_of_gpu_hours"): ("gpu_time_share_ratio", 1.0),
    ("quota", "window_hours"): ("window_seconds", 3600.0),
    ("fragmentation", "mig_instances_total"): ("mig_instances", 1.0),
}


@dataclass(frozen=True, slots=True)
class FindingGauge:
    """One series per finding of ``kinds``: labels from the subject, then the evidence
    (``""`` where neither has it), value from ``value``; None skips the finding."""

    name: str
    help: str
    kinds: tuple[str, ...]
    labels: tuple[str, ...]
    value: Callable[[FindingLike], float | None]


def _since(f: FindingLike) -> float | None:
    return f.since.timestamp() if f.since is not None else None


def _evidence(key: str) -> Callable[[FindingLike], float | None]:
    return lambda f: _number(f.evidence.get(key))


_IDLE_KINDS = ("idle_session", "workload_idle")
_IDLE_LABELS = ("kind", "namespace", "pod", "container", "node", "workload_kind")
FINDING_GAUGES: tuple[FindingGauge, ...] = (
    FindingGauge(
        "gpuscope_idle_since_timestamp_seconds",
        "When an idle session (idle_session) or idle batch workload (workload_idle) went "
        "idle, as Unix time; time() minus it is how long.",
        _IDLE_KINDS,
        _IDLE_LABELS,
        _since,
    ),
    FindingGauge(
        "gpuscope_idle_gpus_held",
        "GPUs an idle session or workload holds.",
        _IDLE_KINDS,
        _IDLE_LABELS,
        _evidence("gpus_held"),
    ),
)

_BAD = re.compile(r"[^a-zA-Z0-9_]")


def _name(*parts: str) -> str:
    return "gpuscope_" + "_".join(_BAD.sub("_", p).strip("_") for p in parts)


def _number(v: object) -> float | None:
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, int | float):
        return float(v)
    return None


class AnalyticsGauges(Collector):
    """Holds the latest analysis of each detector; ``collect`` turns them into gauges."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, Summarised] = {}

    def update(self, analyses: Mapping[str, Summarised]) -> None:
        with self._lock:
            self._latest.update(analyses)

    def latest(self, detector: str) -> Summarised | None:
        """The last run of a detector (the API serves some whole: api_topology.py)."""
        with self._lock:
            return self._latest.get(detector)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            latest = dict(self._latest)
        families: dict[str, GaugeMetricFamily] = {}

        def family(name: str, help_: str, labels: list[str]) -> GaugeMetricFamily:
            fam = families.get(name)
            if fam is None:
                fam = families[name] = GaugeMetricFamily(name, help_, labels=labels)
            return fam

        findings = family(
            "gpuscope_findings",
            "Open findings of the last run, by kind, severity and the labels that route them.",
            ["kind", "severity"],
        )
        counts: dict[tuple[tuple[str, str], ...], int] = {}
        for detector, analysis in sorted(latest.items()):
            for kind in analysis.kinds:
                for severity in ("info", "warning", "critical"):
                    counts.setdefault((("kind", kind), ("severity", severity)), 0)
            for f in analysis.findings:
                key = (("kind", f.kind), ("severity", f.severity), *_routing(f))
                counts[key] = counts.get(key, 0) + 1
            if detector == "topology":  # nested levels and domains: topology_gauges.py
                topology_gauges(analysis.summary, family)
                continue
            self._summary(detector, analysis.summary, family)
        for key, n in sorted(counts.items()):
            # one label set per finding's routing labels; the plain {kind, severity} series
            # is always there (0 when none), so an alert on it sees the count fall back
            findings.samples.append(Sample("gpuscope_findings", dict(key), float(n)))
        for spec in FINDING_GAUGES:
            fam = family(spec.name, spec.help, list(spec.labels))
            for analysis in latest.values():
                for f in analysis.findings:
                    value = spec.value(f) if f.kind in spec.kinds else None
                    if value is not None:
                        fam.add_metric([_label(f, name) for name in spec.labels], value)
        yield from families.values()

    @staticmethod
    def _summary(detector: str, summary: Mapping[str, Any], family: Any) -> None:
        flat = {_field(detector, k)[0] for k, v in summary.items() if _number(v) is not None}
        for key, value in summary.items():
            number = _number(value)
            if number is not None:
                name, factor = _field(detector, key)
                family(_name(detector, name), f"{detector} analysis: {key}.", []).add_metric(
                    [], number * factor
                )
                continue
            if not isinstance(value, Mapping):
                continue
            label = ENTITY_LABELS.get((detector, key)) or (key[:-1] if key.endswith("s") else key)
            for entity, fields in value.items():
                if not isinstance(fields, Mapping):
                    n = _number(fields)
                    if n is not None:
                        family(_name(detector, key), f"{detector} analysis: {key}.",
                               [label]).add_metric([str(entity)], n)  # fmt: skip
                    continue
                for field, v in fields.items():
                    n = _number(v)
                    if n is None:
                        continue
                    base, factor = _field(detector, field)
                    # the cluster-wide number has the plain name
                    name = _name(detector, label, base) if base in flat else _name(detector, base)
                    family(name, f"{detector} analysis: {field} per {label}.",
                           [label]).add_metric([str(entity)], n * factor)  # fmt: skip


def _field(detector: str, key: str) -> tuple[str, float]:
    """The name part a summary key takes in its gauge's name, and the factor to its unit."""
    return GAUGE_NAMES.get((detector, key), (key, 1.0))


#: Labels ``gpuscope_findings`` carries where a finding has them (subject, else evidence),
#: so Alertmanager can route a finding to its team: the Prometheus rules' per-pod idle
#: alerts and per-project quota alerts keep them. Bounded by the open findings.
ROUTING_LABELS = ("namespace", "pod", "project", "owner", "node")


def _routing(f: FindingLike) -> tuple[tuple[str, str], ...]:
    """The finding's non-empty routing labels, in :data:`ROUTING_LABELS` order."""
    return tuple((n, v) for n in ROUTING_LABELS if (v := _label(f, n)))


def _label(f: FindingLike, name: str) -> str:
    if name == "kind":
        return f.kind
    value = f.subject.get(name, f.evidence.get(name, ""))
    return "" if value is None else str(value)
