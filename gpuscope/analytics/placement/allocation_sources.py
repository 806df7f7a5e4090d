"""Where the allocation model's records come from: ``kubectl get -o json`` output (with the
DRA objects of an ``--objects`` file) and the store's current inventory rows, each turned
into node and pod records and into a :class:`~gpuscope.analytics.placement.allocation.ClusterState`
by :func:`~gpuscope.analytics.placement.allocation.state_from_records`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import duckdb

from gpuscope.analytics.placement.allocation import ClusterState, GpuIndices, state_from_records
from gpuscope.collector.cluster.dra_apply import apply_object_set
from gpuscope.collector.cluster.inventory_records import (
    NodeInfo,
    PodInfo,
    node_from_json,
    pod_from_json,
)
from gpuscope.core.collector_settings import WorkloadSettings
from gpuscope.core.records import WorkloadKind


def records_from_kubectl(
    nodes: Mapping[str, Any],
    pods: Mapping[str, Any],
    workloads: WorkloadSettings | None = None,
    objects: Any = None,
) -> tuple[list[NodeInfo], list[PodInfo]]:
    """Node and pod records from ``kubectl get nodes/pods -o json`` output; with
    ``objects`` (an ``--objects`` ObjectSet), DRA devices and claims counted in
    (:mod:`gpuscope.collector.cluster.dra_apply`)."""
    node_infos, pod_infos, _ = kubectl_records(nodes, pods, workloads, objects)
    return node_infos, pod_infos


def kubectl_records(
    nodes: Mapping[str, Any],
    pods: Mapping[str, Any],
    workloads: WorkloadSettings | None = None,
    objects: Any = None,
) -> tuple[list[NodeInfo], list[PodInfo], dict[str, tuple[int, ...]]]:
    """:func:`records_from_kubectl` and the GPU indices DRA claims say pods hold (pass them
    on as ``gpu_indices`` wherever GPUs are placed, so every view agrees)."""
    node_infos = [node_from_json(obj) for obj in nodes.get("items") or ()]
    by_name = {n.name: n for n in node_infos}
    pod_infos = [
        pod_from_json(
            obj,
            node=by_name.get((obj.get("spec") or {}).get("nodeName") or ""),
            settings=workloads,
        )
        for obj in pods.get("items") or ()
    ]
    dra = apply_object_set(node_infos, pod_infos, pods.get("items") or (), objects)
    return list(dra.nodes), list(dra.pods), dict(dra.gpu_indices)


def state_from_kubectl(
    nodes: Mapping[str, Any],
    pods: Mapping[str, Any],
    workloads: WorkloadSettings | None = None,
    gpu_indices: GpuIndices | None = None,
    objects: Any = None,
) -> ClusterState:
    """The state from ``kubectl get nodes -o json`` and ``kubectl get pods -A -o json``
    (and the DRA objects of ``objects``, whose claims say which GPU a pod holds)."""
    node_infos, pod_infos, known = kubectl_records(nodes, pods, workloads, objects)
    return state_from_records(node_infos, pod_infos, {**known, **(gpu_indices or {})})


#: Record fields stored as JSON lists that the records hold as tuples.
_TUPLE_FIELDS = frozenset({"taints", "tolerations", "node_selector_terms"})


def record_of(cls: type[Any], data: Mapping[str, Any]) -> Any:
    """A record of ``cls`` from its stored JSON: unknown keys left out (a field removed
    since the row was written), stored lists back to tuples."""
    names = {f.name for f in fields(cls)}
    return cls(
        **{
            k: tuple(v) if k in _TUPLE_FIELDS and isinstance(v, list) else v
            for k, v in data.items()
            if k in names
        }
    )


def records_from_inventory(
    con: duckdb.DuckDBPyConnection,
) -> tuple[list[NodeInfo], list[PodInfo]]:
    """The store's current inventory rows (``valid_to IS NULL``) as records."""
    node_rows = con.execute(
        "SELECT record FROM inventory_nodes WHERE valid_to IS NULL ORDER BY key"
    ).fetchall()
    pod_rows = con.execute(
        "SELECT record FROM inventory_pods WHERE valid_to IS NULL ORDER BY key"
    ).fetchall()
    nodes = [record_of(NodeInfo, json.loads(r[0])) for r in node_rows]
    pods = []
    for (text,) in pod_rows:
        data = json.loads(text)
        kind = data.get("kind", WorkloadKind.UNKNOWN.value)
        data["kind"] = (
            WorkloadKind(kind) if kind in WorkloadKind._value2member_map_ else WorkloadKind.UNKNOWN
        )
        pods.append(record_of(PodInfo, data))
    return nodes, pods


def state_from_inventory(
    con: duckdb.DuckDBPyConnection, gpu_indices: GpuIndices | None = None
) -> ClusterState:
    """The state from the store's current inventory rows (``valid_to IS NULL``)."""
    nodes, pods = records_from_inventory(con)
    return state_from_records(nodes, pods, gpu_indices)
