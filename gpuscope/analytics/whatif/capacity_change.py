"""A change to a cluster's nodes, for the capacity what-if: nodes added, removed, MIG re-laid.

Three kinds of change, each parsed from the text ``gpuscope whatif`` and ``/api/v1/whatif``
take (a bad one is a :class:`~gpuscope.core.errors.UserError`, one line):

- ``MODEL:COUNT[:GPUS]`` (:func:`parse_add`): COUNT more nodes of GPU model MODEL, each a
  copy of the cluster's most common node shape of that model (pool, CPU, memory, storage,
  taints, labels; with GPUS, the most common shape of that model with GPUS GPUs, else the
  model's most common shape with its CPU, memory and storage scaled to GPUS). Only models
  the cluster has: a shape is copied, never invented. Added nodes are named
  ``whatif-<model>-<n>`` and labelled as their template (its topology domain included),
  but for ``kubernetes.io/hostname``.
- a node selector (:func:`parse_selector`): kubectl's ``-l`` syntax (``k=v``, ``k==v``,
  ``k!=v``, ``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)``, comma-separated, all must
  hold), or a node's name: a bare word naming a node removes that node, else it selects
  the nodes that have that label. Selecting no node is an error.
- ``POOL:LAYOUT`` (:func:`parse_mig`): every GPU of the pool's GPU nodes re-partitioned to
  LAYOUT, per GPU: ``PROFILE[=N]`` comma-separated (``3g.40gb=2``; a profile without ``=N``
  as many times as the compute slices the others leave of a GPU's 7 hold), or ``none``
  for whole GPUs. A node's physical GPUs are its ``nvidia.com/gpu.count`` label where
  set, else its whole GPUs plus its MIG instances' slices over 7 (rounded up).

:func:`apply_change` applies them in that order (removals first, so an added node is never
removed by the same change's selector) to an inventory and its node records.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuscope.analytics.placement.allocation import NodeState
from gpuscope.analytics.whatif.events import Inventory
from gpuscope.collector.cluster.inventory_records import NodeInfo
from gpuscope.core.errors import UserError

#: Compute slices of one MIG-capable GPU (A100, H100, H200: seven).
MIG_SLICES = 7
#: Nodes one change may add at most (per ``--add-nodes``).
MAX_ADD = 100_000
HOSTNAME = "kubernetes.io/hostname"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
_PROFILE = re.compile(r"^([1-7])g\.\d+gb(\+me)?$")
_ADD = re.compile(r"^([^:\s]+):(\d+)(?::(\d+))?$")
_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_REQ = re.compile(
    rf"^\s*(?:(?P<notkey>!\s*{_KEY})|(?P<key>{_KEY})\s*"
    rf"(?:(?P<op>==|!=|=)\s*(?P<value>[-A-Za-z0-9_.]*)"
    rf"|\s+(?P<set>in|notin)\s*\((?P<values>[^()]*)\))?)\s*$"
)


@dataclass(frozen=True, slots=True)
class AddNodes:
    """COUNT nodes of MODEL (GPUS each, None: the model's most common count)."""

    model: str
    count: int
    gpus: int | None = None

    @property
    def text(self) -> str:
        return f"{self.model}:{self.count}" + ("" if self.gpus is None else f":{self.gpus}")


@dataclass(frozen=True, slots=True)
class Requirement:
    """One requirement of a label selector: ``op`` is =, !=, in, notin, exists, !exists."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def holds(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values  # != and notin


@dataclass(frozen=True, slots=True)
class Selector:
    """Nodes to remove: a label selector, or (``name`` set) a node by name, or a bare
    label key when no node has that name (module docstring)."""

    text: str
    requirements: tuple[Requirement, ...] = ()
    name: str | None = None

    def selects(self, node: str, labels: Mapping[str, str], names: frozenset[str]) -> bool:
        if self.name is not None and self.name in names:
            return node == self.name
        return all(r.holds(labels) for r in self.requirements)


@dataclass(frozen=True, slots=True)
class MigLayout:
    """Every GPU of POOL split into ``per_gpu`` instances (() : whole GPUs)."""

    pool: str
    per_gpu: tuple[tuple[str, int], ...]

    @property
    def text(self) -> str:
        layout = ",".join(f"{p}={n}" for p, n in self.per_gpu) or "none"
        return f"{self.pool}:{layout}"


@dataclass(frozen=True, slots=True)
class Change:
    """A change to the cluster's nodes (nothing: the cluster as it was)."""

    add: tuple[AddNodes, ...] = ()
    remove: tuple[Selector, ...] = ()
    mig: tuple[MigLayout, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.add or self.remove or self.mig)

    def as_dict(self) -> dict[str, list[str]]:
        return {
            "add_nodes": [a.text for a in self.add],
            "remove_nodes": [s.text for s in self.remove],
            "mig_layout": [m.text for m in self.mig],
        }


def parse_add(text: str) -> AddNodes:
    """``MODEL:COUNT[:GPUS]``."""
    m = _ADD.match(text.strip())
    if m is None:
        raise UserError(f"--add-nodes {text!r}: expected MODEL:COUNT[:GPUS], e.g. H100:4:8")
    count = int(m.group(2))
    gpus = None if m.group(3) is None else int(m.group(3))
    if not 1 <= count <= MAX_ADD:
        raise UserError(f"--add-nodes {text!r}: COUNT must be 1..{MAX_ADD}")
    if gpus is not None and not 1 <= gpus <= 64:
        raise UserError(f"--add-nodes {text!r}: GPUS must be 1..64")
    return AddNodes(m.group(1), count, gpus)


def _split(text: str) -> list[str]:
    """The selector's requirements: commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur]


def parse_selector(text: str) -> Selector:
    """kubectl ``-l`` syntax, or a node's name (module docstring)."""
    if not text.strip() or len(text) > 1000:
        raise UserError("--remove-nodes: expected a label selector or a node name")
    reqs = []
    for part in _split(text):
        m = _REQ.match(part)
        if m is None:
            raise UserError(f"--remove-nodes {text!r}: {part.strip()!r} is not a selector term")
        if m.group("notkey"):
            reqs.append(Requirement(m.group("notkey").lstrip("! "), "!exists"))
        elif m.group("set"):
            values = tuple(v.strip() for v in m.group("values").split(",") if v.strip())
            reqs.append(Requirement(m.group("key"), m.group("set"), values))
        elif m.group("op"):
            op = "=" if m.group("op") == "==" else m.group("op")
            reqs.append(Requirement(m.group("key"), op, (m.group("value"),)))
        else:
            reqs.append(Requirement(m.group("key"), "exists"))
    bare = len(reqs) == 1 and reqs[0].op == "exists"
    return Selector(text.strip(), tuple(reqs), reqs[0].key if bare else None)


def parse_mig(text: str) -> MigLayout:
    """``POOL:PROFILE[=N][,PROFILE[=N]...]`` or ``POOL:none``."""
    pool, sep, layout = text.strip().rpartition(":")
    if not sep or not pool or not layout:
        raise UserError(f"--mig-layout {text!r}: expected POOL:PROFILE[=N],... or POOL:none")
    if layout == "none":
        return MigLayout(pool, ())
    per_gpu: dict[str, int] = {}
    fill: list[str] = []
    for item in layout.split(","):
        profile, eq, count_text = item.strip().partition("=")
        if _PROFILE.match(profile) is None:
            raise UserError(f"--mig-layout {text!r}: {profile!r} is not a MIG profile (3g.40gb)")
        if eq and not count_text.isdigit():
            raise UserError(f"--mig-layout {text!r}: {item!r}: expected PROFILE=N")
        if eq:
            per_gpu[profile] = per_gpu.get(profile, 0) + int(count_text)
        else:
            fill.append(profile)
    for profile in fill:  # without =N: as many as the slices left hold
        left = MIG_SLICES - sum(int(p[0]) * n for p, n in per_gpu.items())
        per_gpu[profile] = per_gpu.get(profile, 0) + max(0, left) // int(profile[0])
    per_gpu = {p: n for p, n in per_gpu.items() if n}
    slices = sum(int(p[0]) * n for p, n in per_gpu.items())
    if slices > MIG_SLICES or slices == 0:
        raise UserError(
            f"--mig-layout {text!r}: {slices} compute slices a GPU; a GPU has {MIG_SLICES}"
        )
    return MigLayout(pool, tuple(sorted(per_gpu.items())))


def change_of(
    add: Sequence[str] | None, remove: Sequence[str] | None, mig: Sequence[str] | None
) -> Change:
    """The change the CLI's flags (or the API's parameters) ask for; UserError on a bad one."""
    return Change(
        add=tuple(parse_add(a) for a in add or ()),
        remove=tuple(parse_selector(s) for s in remove or ()),
        mig=tuple(parse_mig(m) for m in mig or ()),
    )


def physical_gpus(node: NodeState) -> int:
    """A node's GPUs whether whole or MIG-split (module docstring)."""
    labels = dict(node.labels)
    if labels.get(GPU_COUNT_LABEL, "").isdigit():
        return int(labels[GPU_COUNT_LABEL])
    slices = sum(int(p[0]) * n for p, n in node.mig_total if p[:1].isdigit())
    return len(node.gpus) + math.ceil(slices / MIG_SLICES)


def _shape(node: NodeState) -> tuple[object, ...]:
    labels = tuple((k, v) for k, v in node.labels if k != HOSTNAME)
    return (node.pool, node.gpu_model, len(node.gpus), node.cpu_milli_total,
            node.memory_mib_total, node.ephemeral_mib_total, node.mig_total, node.taints,
            labels)  # fmt: skip


def template_of(nodes: Sequence[NodeState], model: str, gpus: int | None = None) -> NodeState:
    """The most common shape of the model's schedulable GPU nodes (with ``gpus`` GPUs where
    one has that many; ties: the first in inventory order)."""
    of_model = [n for n in nodes if n.gpu_model == model and n.schedulable and physical_gpus(n)]
    if not of_model:
        models = sorted({n.gpu_model for n in nodes if n.gpu_model and physical_gpus(n)})
        raise UserError(
            f"--add-nodes: no schedulable {model!r} node to copy; the cluster's GPU models: "
            f"{', '.join(models) or 'none'}"
        )
    if gpus is not None and any(len(n.gpus) == gpus for n in of_model):
        of_model = [n for n in of_model if len(n.gpus) == gpus]
    counts = Counter(_shape(n) for n in of_model)
    best = max(counts.values())
    return next(n for n in of_model if counts[_shape(n)] == best)


def _scaled(total: int, num: int, den: int) -> int:
    return total * num // den if den else total


def _copy(template: NodeState, name: str, gpus: int | None) -> NodeState:
    n = len(template.gpus) if gpus is None else gpus
    if gpus is not None and gpus != len(template.gpus):
        if not template.gpus:
            raise UserError(
                f"--add-nodes {template.gpu_model}:...:{gpus}: its nodes are MIG-split; "
                f"leave GPUS out"
            )
        k = len(template.gpus)
        cpu, mem = (
            _scaled(template.cpu_milli_total, n, k),
            _scaled(template.memory_mib_total, n, k),
        )
        eph = _scaled(template.ephemeral_mib_total, n, k)
    else:
        cpu, mem, eph = (
            template.cpu_milli_total,
            template.memory_mib_total,
            template.ephemeral_mib_total,
        )
    labels = tuple((k, name if k == HOSTNAME else v) for k, v in template.labels)
    return dataclasses.replace(
        template, name=name, gpus=(1.0,) * n, cpu_milli_free=cpu, cpu_milli_total=cpu,
        memory_mib_free=mem, memory_mib_total=mem, ephemeral_mib_free=eph,
        ephemeral_mib_total=eph, mig_free=template.mig_total, labels=labels,
    )  # fmt: skip


def _relaid(node: NodeState, layout: MigLayout) -> NodeState:
    physical = physical_gpus(node)
    if not layout.per_gpu:
        return dataclasses.replace(node, gpus=(1.0,) * physical, mig_free=(), mig_total=())
    mig = tuple((p, n * physical) for p, n in layout.per_gpu)
    return dataclasses.replace(node, gpus=(), mig_free=mig, mig_total=mig)


def _info(infos: Mapping[str, NodeInfo], node: NodeState, template: str) -> NodeInfo | None:
    base = infos.get(template)
    if base is None:
        return None
    labels = {k: (node.name if k == HOSTNAME else v) for k, v in base.labels.items()}
    return dataclasses.replace(
        base, name=node.name, allocatable_gpus=len(node.gpus), mig=dict(node.mig_total),
        labels=labels, cpu_milli=node.cpu_milli_total, memory_mib=node.memory_mib_total,
        ephemeral_mib=node.ephemeral_mib_total,
    )  # fmt: skip


def added_nodes(
    nodes: Sequence[NodeState], add: AddNodes, taken: set[str]
) -> list[tuple[NodeState, str]]:
    """The nodes ``add`` makes (each with its template's name), named apart from ``taken``
    (which gains their names)."""
    template = template_of(nodes, add.model, add.gpus)
    slug = re.sub(r"[^a-z0-9.-]+", "-", add.model.lower()).strip("-") or "gpu"
    out: list[tuple[NodeState, str]] = []
    i = 0
    while len(out) < add.count:
        i += 1
        name = f"whatif-{slug}-{i}"
        if name not in taken:
            taken.add(name)
            out.append((_copy(template, name, add.gpus), template.name))
    return out


def apply_change(
    inventory: Inventory, node_infos: Sequence[NodeInfo], change: Change
) -> tuple[Inventory, tuple[NodeInfo, ...]]:
    """The inventory and node records after the change (module docstring)."""
    nodes = list(inventory.nodes)
    names = frozenset(n.name for n in nodes)
    for sel in change.remove:
        kept = [n for n in nodes if not sel.selects(n.name, dict(n.labels), names)]
        if len(kept) == len(nodes):
            raise UserError(f"--remove-nodes {sel.text!r} selects no node of the cluster")
        nodes = kept
    for layout in change.mig:
        pool = [i for i, n in enumerate(nodes) if n.pool == layout.pool and physical_gpus(n)]
        if not pool:
            pools = sorted({n.pool for n in nodes if physical_gpus(n)})
            raise UserError(
                f"--mig-layout {layout.text!r}: no GPU node in pool {layout.pool!r}; "
                f"pools: {', '.join(pools) or 'none'}"
            )
        for i in pool:
            nodes[i] = _relaid(nodes[i], layout)
    taken = set(names)
    infos = {i.name: i for i in node_infos}
    new_infos: dict[str, NodeInfo] = {}
    for add in change.add:
        for node, template in added_nodes(nodes, add, taken):
            nodes.append(node)
            info = _info(infos, node, template)
            if info is not None:
                new_infos[node.name] = info
    by_name = {n.name: n for n in nodes}
    out_infos = [
        dataclasses.replace(info, allocatable_gpus=len(one.gpus), mig=dict(one.mig_total))
        for info in node_infos
        if (one := by_name.get(info.name)) is not None
    ]
    return Inventory(tuple(nodes)), (*out_infos, *new_infos.values())
