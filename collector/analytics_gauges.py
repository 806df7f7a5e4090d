"""The analytics' headline numbers as gauges on the collector's ``/metrics``.

Grafana then needs only a Prometheus data source. Each detector's numeric summary value
``key`` becomes ``gpuscope_<detector>_<key>``; a summary entry that maps names to numbers
per entity (``{"projects": {"nlp": {"used_gpus": 64}}}``) becomes a gauge labelled by the
singular of its key (``gpuscope_quota_used_gpus{project="nlp"}``). Open findings are
counted by kind and severity in ``gpuscope_findings``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class FindingLike(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def severity(self) -> str: ...


class Summarised(Protocol):
    """What a detector's run gives (analytics.base.Analysis has this shape; the collector
    does not import analytics: layers point one way)."""

    @property
    def kinds(self) -> tuple[str, ...]: ...
    @property
    def findings(self) -> Sequence[FindingLike]: ...
    @property
    def summary(self) -> Mapping[str, Any]: ...


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

        findings = family("gpuscope_findings", "Open findings of the last run, by kind and "
                          "severity.", ["kind", "severity"])  # fmt: skip
        counts: dict[tuple[str, str], int] = {}
        for detector, analysis in sorted(latest.items()):
            for kind in analysis.kinds:
                for severity in ("info", "warning", "critical"):
                    counts.setdefault((kind, severity), 0)
            for f in analysis.findings:
                counts[(f.kind, f.severity)] = counts.get((f.kind, f.severity), 0) + 1
            self._summary(detector, analysis.summary, family)
        for (kind, severity), n in sorted(counts.items()):
            findings.add_metric([kind, severity], float(n))
        yield from families.values()

    @staticmethod
    def _summary(detector: str, summary: Mapping[str, Any], family: Any) -> None:
        for key, value in summary.items():
            number = _number(value)
            if number is not None:
                family(_name(detector, key), f"{detector} analysis: {key}.", []).add_metric(
                    [], number
                )
                continue
            if not isinstance(value, Mapping):
                continue
            label = key[:-1] if key.endswith("s") else key
            for entity, fields in value.items():
                if not isinstance(fields, Mapping):
                    n = _number(fields)
                    if n is not None:
                        family(_name(detector, key), f"{detector} analysis: {key}.",
                               [label]).add_metric([str(entity)], n)  # fmt: skip
                    continue
                for field, v in fields.items():
                    n = _number(v)
                    if n is not None:
                        family(_name(detector, field), f"{detector} analysis: {field} per "
                               f"{label}.", [label]).add_metric([str(entity)], n)  # fmt: skip
