"""dcgm-exporter pages into catalogue series, so a cluster running the GPU Operator's
exporter gets gpuscope's analytics without gpuscope's agent.

The translation of ``DCGM_FI_*`` fields lives in :mod:`gpuscope.core.dcgm` and the naming of
series in :mod:`gpuscope.core.series`, both shared with the agent, so a GPU read either way ends
up as the same series. The exporter's own pod labels become workload series; their kind
and project are resolved later against the Kubernetes inventory.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from gpuscope.collector.scraping.batch import Batch, Labels
from gpuscope.core.catalogue import AGENT_METRICS_BY_NAME
from gpuscope.core.dcgm import readings_from_dcgm_exporter
from gpuscope.core.records import GpuWorkload
from gpuscope.core.series import node_series

_TYPES = {m.name: m.type for m in AGENT_METRICS_BY_NAME.values()}


def dcgm_batch(
    target: str,
    ts_ms: int,
    series: Iterable[tuple[str, Mapping[str, str], float]],
    default_node: str,
) -> Batch:
    """Translate one dcgm-exporter page; ``Hostname`` names the node, else ``default_node``."""
    by_host: dict[str, list[tuple[str, Mapping[str, str], float]]] = defaultdict(list)
    for name, labels, value in series:
        by_host[labels.get("Hostname") or default_node].append((name, labels, value))
    names: list[str] = []
    label_rows: list[Labels] = []
    values: list[float] = []
    for host, items in by_host.items():
        readings = readings_from_dcgm_exporter(items)
        workloads = [
            GpuWorkload(
                gpu_uuid=r.uuid,
                namespace=p.namespace,
                pod=p.pod,
                container=p.container,
                project=p.namespace,
            )
            for r in readings
            for p in r.pods
        ]
        for family, label_values, value in node_series(host, readings, workloads):
            spec = AGENT_METRICS_BY_NAME[family]
            names.append(spec.sample_name)
            label_rows.append(tuple(sorted(zip(spec.labels, label_values, strict=True))))
            values.append(value)
    return Batch(target, ts_ms, names, label_rows, values, dict(_TYPES))
