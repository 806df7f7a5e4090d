"""The topology analysis from its inputs: node and pod records (kubectl files or the
store's inventory) and the ``--objects`` the schedulers define topology and pod groups with.

Reading files is the caller's (:func:`topology_from_files` is the CLI's entry point); the
rest is pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from gpuscope.analytics.base import Analysis
from gpuscope.analytics.consolidation.model import placement_from_state
from gpuscope.analytics.domains.topology import analyze_topology
from gpuscope.analytics.domains.topology_groups import pod_groups
from gpuscope.analytics.domains.topology_levels import topology_of
from gpuscope.analytics.placement.allocation import state_from_records
from gpuscope.analytics.placement.allocation_sources import kubectl_records
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.core.errors import UserError
from gpuscope.core.kube_objects import ObjectSet
from gpuscope.core.settings import Settings


def topology_analysis(
    nodes: Sequence[NodeInfo],
    pods: Sequence[PodInfo],
    objects: ObjectSet,
    *,
    at: datetime,
    settings: Settings,
    gpu_indices: Mapping[str, Sequence[int]] | None = None,
) -> Analysis:
    """Levels from the objects (else node labels), pod groups, measures and findings, with
    the plan that clears a domain for each blocked group."""
    groups = pod_groups(pods, objects)
    asked = {lv for g in groups for lv in (g.required_level, g.preferred_level) if lv}
    labels = settings.analytics.topology_labels
    topo = topology_of(nodes, objects, labels, sorted(asked))
    state = state_from_records(nodes, pods, gpu_indices)
    placed = placement_from_state(
        state,
        pods,
        at=at,
        gpu_indices=gpu_indices,
        protected_namespaces=settings.workloads.protected_namespaces,
    )
    return analyze_topology(state, topo, groups, at=at, placed=placed)


def read_kubectl_list(path: Path) -> dict[str, object]:
    """A ``kubectl get ... -o json`` List; one clear error otherwise."""
    if path.is_dir():
        raise UserError(f"{path} is a folder; expected a file")
    if not path.is_file():
        raise UserError(f"{path} does not exist")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} is not kubectl JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
        raise UserError(f"{path} is not a kubectl List (no 'items')")
    return doc


def topology_from_files(
    nodes: Path, pods: Path, objects: ObjectSet, *, at: datetime, settings: Settings
) -> Analysis:
    """The analysis of kubectl files, with the DRA objects among ``objects`` counted in
    (ResourceSlices' GPUs, claims' allocations, pending pods' claim templates) as
    fragmentation and consolidation count them, and the GPUs each claim says a pod holds."""
    node_infos, pod_infos, known = kubectl_records(
        read_kubectl_list(nodes), read_kubectl_list(pods), settings.workloads, objects
    )
    return topology_analysis(
        node_infos, pod_infos, objects, at=at, settings=settings, gpu_indices=known
    )
