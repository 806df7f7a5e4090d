"""A fast encoder for the Prometheus text format (0.0.4) of a prometheus_client registry.

The agent's own page does not come through here (``gpuscope/agent/serving/page.py`` writes it from
the series); this serves a registry that holds the agent's collector beside others (the demo,
tests, the ingest benchmark). prometheus_client's ``generate_latest`` validates and
escapes every label *name* of every sample (it supports UTF-8 names); this encoder only
escapes label *values*. Its output is byte-for-byte what ``generate_latest`` writes for
the same families (a test holds it to that); OpenMetrics requests use prometheus_client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import utils as _pc_utils
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

_TYPES = {
    "counter": "counter",
    "gauge": "gauge",
    "summary": "summary",
    "histogram": "histogram",
    "unknown": "untyped",
    "info": "gauge",
    "stateset": "gauge",
    "gaugehistogram": "histogram",
}


#: Go-style float formatting, exactly as prometheus_client writes values.
_go_float: Callable[[float], str] = _pc_utils.floatToGoString


def _esc(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def encode_families(families: Iterable[Metric]) -> bytes:
    out: list[str] = []
    append = out.append
    for fam in families:
        name = fam.name
        kind = fam.type
        if kind == "counter":
            name += "_total"
        elif kind == "info":
            name += "_info"
        doc = fam.documentation.replace("\\", r"\\").replace("\n", r"\n")
        append(f"# HELP {name} {doc}\n# TYPE {name} {_TYPES.get(kind, kind)}\n")
        created: list[str] = []
        # a family's samples almost always share one label set: sort its names once
        keys: list[str] = sorted(fam.samples[0].labels) if fam.samples else []
        key_set = set(keys)
        for s in fam.samples:
            labels = s.labels
            if labels:
                order = keys if labels.keys() == key_set else sorted(labels)
                body = ",".join([f'{k}="{_esc(labels[k])}"' for k in order])
                line = f"{s.name}{{{body}}} {_go_float(s.value)}"
            else:
                line = f"{s.name} {_go_float(s.value)}"
            if s.timestamp is not None:
                line += f" {int(float(s.timestamp) * 1000):d}"
            if s.name == fam.name + "_created":
                created.append(line + "\n")
            else:
                append(line + "\n")
        if created:
            append(f"# HELP {fam.name}_created {doc}\n# TYPE {fam.name}_created gauge\n")
            out.extend(created)
    return "".join(out).encode("utf-8")


def generate_text(registry: Collector) -> bytes:
    """The text exposition of everything a registry collects."""
    return encode_families(registry.collect())
