"""Topology levels and which domain of each level a node sits in.

A *level* is a way of grouping nodes that a multi-node job may be asked to stay inside (an
NVLink domain, a leaf switch, a rack, a block); a *domain* is one group of that level. The
levels come from the scheduler's own objects when the ``--objects`` files hold them, else
from node labels:

- Kueue ``Topology`` (``kueue.x-k8s.io``, ``spec.levels[].nodeLabel``, highest level first),
  on the nodes of the ResourceFlavors that name it in ``spec.topologyName`` (their
  ``spec.nodeLabels``), all nodes when no flavor names it. As in Kueue, a level's values
  need not be unique across the levels above it: a domain is named by the values of its
  level and every level above (``block-1/rack-1``).
- KAI-Scheduler ``Topology`` (``kai.scheduler``, any version): the same ``spec.levels``.
- Volcano ``HyperNode`` (``topology.volcano.sh``): one level per ``spec.tier`` (tier 1 is
  closest to the nodes), keyed ``topology.volcano.sh/tier-N`` since HyperNodes are not node
  labels; a HyperNode's nodes are its members, matched by ``exactMatch`` name,
  ``regexMatch`` pattern or ``labelMatch`` labels, and those of its member HyperNodes.
- Otherwise the node labels in :data:`DEFAULT_LEVEL_LABELS` (or
  ``analytics.topology_labels``) that some node carries, each a flat level named by its
  value alone. ``kubernetes.io/hostname`` is never a level: a domain of one node says
  nothing node fragmentation does not.

Pure: the objects arrive parsed (:class:`gpuscope.core.kube_objects.ObjectSet`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuscope.collector.cluster.inventory_records import NodeInfo
from gpuscope.core.kube_objects import ObjectSet

log = logging.getLogger(__name__)

HOSTNAME_LABEL = "kubernetes.io/hostname"
VOLCANO_TIER_PREFIX = "topology.volcano.sh/tier-"

#: Node labels that name topology domains in common use, coarsest first within each
#: family (the order only decides which level is "the finest" for a job that names none).
DEFAULT_LEVEL_LABELS: tuple[str, ...] = (
    # GKE (TPU/GPU) placement: block > sub-block > host
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gce-topology-subblock",
    "cloud.google.com/gce-topology-host",
    # AWS EC2 instance topology: layer 1 is farthest from the instance
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    "topology.k8s.aws/network-node-layer-4",
    # topograph's older keys: core > spine > leaf; the accelerator (NVLink) domain
    "network.topology.nvidia.com/core",
    "network.topology.nvidia.com/spine",
    "network.topology.nvidia.com/leaf",
    "network.topology.nvidia.com/accelerator",
    # topograph's current keys (fabric.topograph.run/tier-N come from the nodes, highest N
    # first: tier 0 is the switch closest to the node)
    "accelerator.topograph.run/domain",
    "accelerator.topograph.run/sub-domain",
    # the GPU operator's NVLink clique (GB200 NVL72: one rack-scale NVLink domain)
    "nvidia.com/gpu.clique",
    # racks as gpuscope's simulator and many on-premise clusters label them
    "topology.gpuscope.io/block",
    "topology.gpuscope.io/rack",
    "topology.gpuscope.io/leaf",
    "topology.kubernetes.io/rack",
)
FABRIC_TIER = re.compile(r"^fabric\.topograph\.run/tier-(\d+)$")


@dataclass(frozen=True, slots=True)
class Level:
    """One topology level: ``key`` is its node label (``topology.volcano.sh/tier-N`` for
    HyperNode tiers), ``source`` where it came from (``kueue:Topology/<name>``,
    ``kai:Topology/<name>``, ``volcano:HyperNode``, ``labels``)."""

    key: str
    source: str


@dataclass(frozen=True, slots=True)
class Topology:
    """The levels, coarsest first, and each node's domain per level (a node missing from
    a level's mapping is in no domain of it: unlabelled, or outside the flavor)."""

    levels: tuple[Level, ...]
    #: level key -> node name -> domain name
    domains: Mapping[str, Mapping[str, str]]

    def level(self, key: str) -> Level | None:
        return next((lv for lv in self.levels if lv.key == key), None)

    @property
    def source(self) -> str:
        kinds = sorted({lv.source.split(":", 1)[0] for lv in self.levels})
        return ",".join(kinds) or "none"


def topology_of(
    nodes: Sequence[NodeInfo],
    objects: ObjectSet | None = None,
    labels: Sequence[str] | None = None,
    extra_labels: Iterable[str] = (),
) -> Topology:
    """The cluster's topology: from the scheduler's objects when they define one, else from
    node labels (``labels``, or :data:`DEFAULT_LEVEL_LABELS` and topograph's fabric tiers).
    ``extra_labels`` (levels pending jobs ask for) are added as flat label levels where no
    level has that key yet."""
    objects = objects or ObjectSet()
    levels: list[Level] = []
    domains: dict[str, dict[str, str]] = {}
    for kind_group, tag in (("kueue.x-k8s.io", "kueue"), ("kai.scheduler", "kai")):
        for topo in objects.of("Topology", group=kind_group):
            _add_hierarchy(topo, tag, objects, nodes, levels, domains)
    _add_hypernodes(objects.of("HyperNode", group="topology.volcano.sh"), nodes, levels, domains)
    if not levels:
        for key in _label_keys(nodes, labels):
            _add_flat(key, nodes, levels, domains)
    for key in extra_labels:
        if key and key != HOSTNAME_LABEL and key not in domains:
            _add_flat(key, nodes, levels, domains)
    return Topology(tuple(levels), domains)


def _label_keys(nodes: Sequence[NodeInfo], labels: Sequence[str] | None) -> list[str]:
    present = {k for n in nodes for k, v in n.labels.items() if v}
    if labels is not None:
        return [k for k in labels if k in present and k != HOSTNAME_LABEL]
    tiers = sorted(
        ((int(m.group(1)), k) for k in present if (m := FABRIC_TIER.match(k))), reverse=True
    )
    keys = [k for k in DEFAULT_LEVEL_LABELS if k in present]
    return [k for _, k in tiers] + keys


def _add_flat(
    key: str, nodes: Sequence[NodeInfo], levels: list[Level], domains: dict[str, dict[str, str]]
) -> None:
    levels.append(Level(key, "labels"))
    domains[key] = {n.name: n.labels[key] for n in nodes if n.labels.get(key)}


def _selected(node: NodeInfo, selector: Mapping[str, Any]) -> bool:
    return all(node.labels.get(str(k)) == str(v) for k, v in selector.items())


def _add_hierarchy(
    topo: Mapping[str, Any],
    tag: str,
    objects: ObjectSet,
    nodes: Sequence[NodeInfo],
    levels: list[Level],
    domains: dict[str, dict[str, str]],
) -> None:
    """A Kueue or KAI Topology: levels highest first; each domain is named by its path."""
    name = str((topo.get("metadata") or {}).get("name") or "")
    keys = [
        str(lv.get("nodeLabel") or "")
        for lv in (topo.get("spec") or {}).get("levels") or ()
        if isinstance(lv, Mapping)
    ]
    keys = [k for k in keys if k]
    selectors = [
        (rf.get("spec") or {}).get("nodeLabels") or {}
        for rf in objects.of("ResourceFlavor", group="kueue.x-k8s.io")
        if tag == "kueue" and (rf.get("spec") or {}).get("topologyName") == name
    ]
    members = [n for n in nodes if not selectors or any(_selected(n, s) for s in selectors)]
    for depth, key in enumerate(keys):
        if key == HOSTNAME_LABEL or key in domains:
            continue
        levels.append(Level(key, f"{tag}:Topology/{name}"))
        path_keys = keys[: depth + 1]
        mapping: dict[str, str] = {}
        for n in members:
            values = [n.labels.get(k, "") for k in path_keys]
            if all(values):
                mapping[n.name] = "/".join(values)
        domains[key] = mapping


def _hypernode_nodes(
    hn: Mapping[str, Any],
    by_name: Mapping[str, Mapping[str, Any]],
    nodes: Sequence[NodeInfo],
    seen: frozenset[str],
) -> set[str]:
    out: set[str] = set()
    for member in (hn.get("spec") or {}).get("members") or ():
        if not isinstance(member, Mapping):
            continue
        sel = member.get("selector") or {}
        kind = str(member.get("type") or "Node")
        if kind == "HyperNode":
            names = _match_names(sel, list(by_name))
            for child in names:
                if child not in seen:
                    out |= _hypernode_nodes(by_name[child], by_name, nodes, seen | {child})
            continue
        if "labelMatch" in sel:
            labels = (sel.get("labelMatch") or {}).get("matchLabels") or {}
            out |= {n.name for n in nodes if _selected(n, labels)}
        else:
            out |= set(_match_names(sel, [n.name for n in nodes]))
    return out


def _match_names(sel: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    if "exactMatch" in sel:
        wanted = str((sel.get("exactMatch") or {}).get("name") or "")
        return [n for n in names if n == wanted]
    if "regexMatch" in sel:
        pattern = str((sel.get("regexMatch") or {}).get("pattern") or "")
        try:
            rx = re.compile(pattern)
        except re.error:
            log.warning("HyperNode regexMatch %r is not a regular expression", pattern)
            return []
        return [n for n in names if rx.fullmatch(n)]
    return []


def _add_hypernodes(
    hypernodes: Sequence[Mapping[str, Any]],
    nodes: Sequence[NodeInfo],
    levels: list[Level],
    domains: dict[str, dict[str, str]],
) -> None:
    by_name = {str((h.get("metadata") or {}).get("name") or ""): h for h in hypernodes}
    tiers: dict[int, dict[str, str]] = {}
    for name, hn in sorted(by_name.items()):
        try:
            tier = int(str((hn.get("spec") or {}).get("tier")))
        except (TypeError, ValueError):
            log.warning("HyperNode %s has no integer spec.tier; left out", name)
            continue
        for node in sorted(_hypernode_nodes(hn, by_name, nodes, frozenset({name}))):
            tiers.setdefault(tier, {}).setdefault(node, name)
    for tier in sorted(tiers, reverse=True):
        key = f"{VOLCANO_TIER_PREFIX}{tier}"
        levels.append(Level(key, "volcano:HyperNode"))
        domains[key] = tiers[tier]
