"""The topology analysis as gauges: one series per domain per level, not per node or job.

``gpuscope analyze topology``'s summary nests levels and domains, which the generic mapping of
:mod:`gpuscope.collector.gauges.analytics_gauges` does not reach; these are its gauges:

- ``gpuscope_topology_domain_free_gpus{level,domain}``: whole free GPUs of the domain;
- ``gpuscope_topology_domain_whole_free_nodes{level,domain}``: its open nodes with every GPU
  free;
- ``gpuscope_topology_domain_largest_job_gpus{level,domain}``: GPUs of the largest job of
  ``pod_gpus``-GPU pods the domain holds now (``largest_job_pods[pod_gpus] * pod_gpus``);
- ``gpuscope_topology_slots{level,job_gpus}``: jobs of that many GPUs that fit at once, each
  inside one domain (``job_gpus`` 8, 16, 32 ... up to the cluster's GPUs: at most
  log2(GPUs) - 2 values);
- ``gpuscope_topology_fragmented_gpus{level}`` / ``_fragmentation_ratio{level}`` /
  ``_free_gpus{level}``;
- ``gpuscope_topology_blocked_pod_groups`` and the other top-level numbers.

Cardinality: three series per domain per level, plus at most a dozen slot sizes and three
figures per level. A cluster of 100 racks and 400 leaves gives 1,500 domain series.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Family = Callable[[str, str, list[str]], Any]
SLOTS_HELP = "Jobs of job_gpus GPUs that fit at once, each inside one domain of the level."


def _num(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def topology_gauges(summary: Mapping[str, Any], family: Family) -> None:
    """Add the topology summary's series to the families (``family(name, help, labels)``)."""
    for key, value in summary.items():
        n = _num(value)
        if n is not None:
            family(f"gpuscope_topology_{key}", f"topology analysis: {key}.", []).add_metric([], n)
    pod_gpus = int(_num(summary.get("pod_gpus")) or 8)
    levels = summary.get("levels")
    if not isinstance(levels, Mapping):
        return
    for level, data in sorted(levels.items()):
        if not isinstance(data, Mapping):
            continue
        for key in ("free_gpus", "fragmented_gpus", "fragmentation_ratio"):
            n = _num(data.get(key))
            if n is not None:
                fam = family(f"gpuscope_topology_level_{key}", f"{key} per level.", ["level"])
                fam.add_metric([level], n)
        for size, count in sorted((data.get("slots") or {}).items(), key=lambda kv: int(kv[0])):
            n = _num(count)
            if n is not None:
                fam = family("gpuscope_topology_slots", SLOTS_HELP, ["level", "job_gpus"])
                fam.add_metric([level, str(size)], n)
        for domain, d in sorted((data.get("domains") or {}).items()):
            if not isinstance(d, Mapping):
                continue
            largest = _num((d.get("largest_job_pods") or {}).get(str(pod_gpus)))
            for name, v, help_ in (
                ("free_gpus", _num(d.get("free_gpus")), "Whole free GPUs of the domain."),
                ("whole_free_nodes", _num(d.get("whole_free_nodes")),
                 "Open nodes of the domain with every GPU free."),
                ("largest_job_gpus", None if largest is None else largest * pod_gpus,
                 "GPUs of the largest job of pod_gpus-GPU pods the domain holds now."),
            ):  # fmt: skip
                if v is not None:
                    family(f"gpuscope_topology_domain_{name}", help_,
                           ["level", "domain"]).add_metric([level, str(domain)], v)  # fmt: skip
