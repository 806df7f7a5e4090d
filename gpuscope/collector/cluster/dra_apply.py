"""DRA devices and claims folded into the node and pod records: one allocation model.

Every placement question (free, whole free, largest placeable, fits now, FGD, the planner,
the what-if, quota usage) reads :class:`~gpuscope.collector.cluster.inventory_records.NodeInfo` and
:class:`~gpuscope.collector.cluster.inventory_records.PodInfo`. Rather than teach each of them DRA,
:func:`apply_dra` writes what DRA hands out in the terms they already count, so a GPU held
through a claim counts exactly as one held through the device plugin:

- **capacity**: a node's GPUs are its device-plugin ``nvidia.com/gpu`` plus the ``type: gpu``
  devices of its ResourceSlices (complete pools at their newest generation,
  :mod:`gpuscope.collector.cluster.dra_records`); ``type: mig`` devices add MIG instances by
  ``profile``. A GPU is handed out by one mechanism or the other, so the two add up.
  The node's GPU model and memory come from the devices' ``productName`` (spaces as dashes,
  as GPU feature discovery labels it) and ``memory`` where its labels do not say.
- **partitionable devices** (``consumesCounters``, the driver's dynamic MIG): a physical GPU
  with nothing allocated on its counters is one whole free GPU; once a MIG placement is
  allocated on it, it is a MIG-split GPU offering, per profile, the placements still
  allocatable on its free counters (greedily, without overlap) plus those in use.
- **use**: a claim's ``status.allocation.devices.results[]`` are held by one pod, the first
  (by namespace/name) of the running pods in ``status.reservedFor`` (a claim shared by
  several pods is counted once). A whole device adds to the pod's ``gpu_request``, a MIG
  device to its ``mig``; a share of a device that allows multiple allocations is the
  largest ratio of ``consumedCapacity`` to the device's capacity (``memory``, ``shares``),
  as ``gpu_fraction``. Which GPU each pod holds is known exactly (``gpu_indices``): the
  device plugin's GPUs are indices ``0..n-1``, the node's DRA GPUs follow in device order.
- **DRA-backed extended resources** (``status.extendedResourceClaimStatus``): the pod's
  ``nvidia.com/gpu`` request already counts the GPU; the claim only says which one.
- **demand**: a pending pod asks for its claim templates' requests (and unallocated
  standalone claims'), read by :mod:`gpuscope.collector.cluster.dra_demand`. What cannot be read
  is said in :attr:`DraApplied.notes` (and logged once).
- **eviction frees a claim's devices only when no other pod keeps them**: a claim
  generated from a template is owned by its pod and dies with it (as a device-plugin
  GPU is freed); a standalone claim outlives the pod, and Kubernetes' resourceclaim
  controller clears its allocation once no pod reserves it, so evicting its only user
  frees the devices too, but while another running pod reserves it (a shared claim) they
  stay allocated and evicting the holder frees nothing. Such holders carry
  :data:`STANDALONE_CLAIMS_ANNOTATION` in their record, which the consolidation planner
  and the quota reclaim read as a reason not to pick them, and are listed, with why, in
  :attr:`DraApplied.pinned`.
- **an allocated claim no running pod reserves keeps its devices**: kube-scheduler
  counts every device of every claim with ``status.allocation`` as in use until the
  allocation is cleared (its allocated-devices tracker), whether ``reservedFor`` is empty or
  names a pod that is gone. Such a claim's devices are held by a record of their own per
  node (``owner_kind`` :data:`CLAIM_HOLDER_KIND`, name ``resourceclaim:<claim>``,
  protected): taken for every placement question, never moved, and not a workload.

Pure: records and objects in, records out.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuscope.collector.cluster.dra_demand import gfd_model, pending_demand, pod_claim_refs
from gpuscope.collector.cluster.dra_records import (
    AllocatedDevice,
    DraClaim,
    DraDevice,
    DraObjects,
    device_order,
)
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo

log = logging.getLogger(__name__)

_MIB = 2**20
#: Set on a pod's *record* (never on the cluster) when it holds devices through standalone
#: claims other running pods also reserve: the consolidation planner and the quota reclaim
#: read it to say why evicting the pod frees nothing.
STANDALONE_CLAIMS_ANNOTATION = "gpuscope.io/dra-standalone-claims"
_ACTIVE = frozenset({"Pending", "Running", "Unknown"})
#: ``owner_kind`` of the records that hold the devices of an allocated claim no running
#: pod reserves (:func:`claim_holder`); their name is the claim's with this prefix.
CLAIM_HOLDER_KIND = "ResourceClaim"
CLAIM_HOLDER_PREFIX = "resourceclaim:"


@dataclass(frozen=True, slots=True)
class DraApplied:
    nodes: tuple[NodeInfo, ...]
    pods: tuple[PodInfo, ...]
    #: GPU indices each pod holds through DRA, by ``namespace/name``.
    gpu_indices: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    #: Pods whose eviction frees none of their DRA devices, with why (``namespace/name``).
    pinned: Mapping[str, str] = field(default_factory=dict)
    #: What could not be read (a selector not understood, a device not published...).
    notes: tuple[str, ...] = ()


#: Notes already logged: the live inventory applies DRA on every sync, and a selector it
#: cannot read is said once, not once a minute.
_SAID: set[str] = set()


def _say_once(line: str) -> None:
    if line not in _SAID:
        if len(_SAID) > 10_000:
            _SAID.clear()
        _SAID.add(line)
        log.info("DRA: %s", line)


@dataclass(slots=True)
class _NodeDevices:
    whole: list[DraDevice] = field(default_factory=list)
    mig: list[DraDevice] = field(default_factory=list)
    #: Partitionable devices by their counter set (one physical GPU each).
    parts: dict[tuple[str, str, str], list[DraDevice]] = field(default_factory=dict)


def _by_node(devices: Iterable[DraDevice]) -> dict[str, _NodeDevices]:
    out: dict[str, _NodeDevices] = defaultdict(_NodeDevices)
    for dev in sorted(devices, key=device_order):
        if not dev.node or not (dev.is_gpu or dev.is_mig):
            continue
        slot = out[dev.node]
        if dev.consumes:
            key = (dev.driver, dev.pool, dev.consumes[0][0][0])
            slot.parts.setdefault(key, []).append(dev)
        elif dev.is_gpu:
            slot.whole.append(dev)
        else:
            slot.mig.append(dev)
    return out


class _Builder:
    """The fold, one cluster at a time."""

    def __init__(self, nodes: Sequence[NodeInfo], dra: DraObjects) -> None:
        self.dra = dra
        self.nodes = {n.name: n for n in nodes}
        self.devices = {d.key: d for d in dra.devices}
        self.claims = {(c.namespace, c.name): c for c in dra.claims}
        self.notes: list[str] = []
        self.index: dict[tuple[str, str, str], int] = {}
        self.allocated: set[tuple[str, str, str]] = {
            a.key for c in dra.claims for a in c.allocated if not a.admin
        }
        self.counter_total = {
            (c.driver, c.pool, c.name, k): v
            for c in dra.counter_sets
            for k, v in c.counters.items()
        }

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # -- capacity ---------------------------------------------------------------------------
    def node(self, node: NodeInfo, devs: _NodeDevices) -> NodeInfo:
        gpus: list[DraDevice] = list(devs.whole)
        mig: dict[str, int] = dict(node.mig)
        for dev in devs.mig:
            mig[dev.profile] = mig.get(dev.profile, 0) + 1
        for key, parts in sorted(devs.parts.items()):
            gpu = next((d for d in parts if d.is_gpu), None)
            used = [d for d in parts if d.key in self.allocated]
            if not used or (gpu is not None and gpu.key in self.allocated):
                if gpu is not None:
                    gpus.append(gpu)
                continue
            for profile, count in self._placements(key, parts).items():
                mig[profile] = mig.get(profile, 0) + count
        base = node.allocatable_gpus
        for i, dev in enumerate(gpus):
            self.index[dev.key] = base + i
        product = next((d.product for d in [*gpus, *devs.mig] if d.product), "")
        memory = next((d.capacity.get("memory", 0.0) for d in gpus if d.capacity.get("memory")), 0)
        return replace(
            node,
            allocatable_gpus=base + len(gpus),
            mig=mig,
            gpu_model=node.gpu_model or gfd_model(product),
            gpu_memory_mib=node.gpu_memory_mib or (round(memory / _MIB) if memory else None),
        )

    def _placements(self, key: tuple[str, str, str], parts: Sequence[DraDevice]) -> dict[str, int]:
        """MIG instances per profile of one partitioned GPU: those allocated, and those
        still allocatable on its free counters (largest profiles' order, no overlap)."""
        driver, pool, _ = key
        left = {
            (cs, c): self.counter_total.get((driver, pool, cs, c), 0.0)
            for d in parts
            for (cs, c), _ in d.consumes
        }
        out: dict[str, int] = {}
        migs = [d for d in parts if d.is_mig]
        for dev in migs:
            if dev.key in self.allocated:
                out[dev.profile] = out.get(dev.profile, 0) + 1
                for counter, amount in dev.consumes:
                    left[counter] -= amount

        def size(dev: DraDevice) -> tuple[float, Any]:
            return (-sum(amount for _, amount in dev.consumes), device_order(dev))

        for dev in sorted(migs, key=size):
            if dev.key in self.allocated:
                continue
            if all(left[c] >= amount - 1e-9 for c, amount in dev.consumes):
                out[dev.profile] = out.get(dev.profile, 0) + 1
                for counter, amount in dev.consumes:
                    left[counter] -= amount
        return out

    # -- use ----------------------------------------------------------------------------------
    def share(self, alloc: AllocatedDevice, dev: DraDevice) -> float:
        if not dev.shared:
            return 1.0
        if not alloc.consumed:
            return 1.0
        ratios = [
            amount / dev.capacity[name]
            for name, amount in alloc.consumed.items()
            if dev.capacity.get(name)
        ]
        return min(1.0, max(ratios, default=1.0))


def apply_dra(
    nodes: Sequence[NodeInfo],
    pods: Sequence[PodInfo],
    pod_objects: Iterable[Mapping[str, Any]],
    dra: DraObjects,
) -> DraApplied:
    """The records with DRA's devices and claims counted in (module docstring)."""
    b = _Builder(nodes, dra)
    by_node = _by_node(dra.devices)
    for name in sorted(set(by_node) - set(b.nodes)):
        b.note(f"ResourceSlice devices on node {name}, which is not in the inventory, left out")
    new_nodes = tuple(b.node(n, by_node[n.name]) if n.name in by_node else n for n in nodes)
    infos = {p.uid: p for p in pods}
    objects = {str((o.get("metadata") or {}).get("uid", "")): o for o in pod_objects}
    active = {uid: p for uid, p in infos.items() if p.node is not None and p.phase in _ACTIVE}

    def holder(claim: DraClaim, referrers: list[str]) -> str:
        reserved = [u for u in claim.reserved_for if u in active] or [
            u for u in referrers if u in active
        ]
        return min(reserved, key=lambda u: (active[u].namespace, active[u].name), default="")

    referrers: dict[tuple[str, str], list[str]] = defaultdict(list)
    for uid, obj in objects.items():
        pod = infos.get(uid)
        if pod is None:
            continue
        for _, claim_name, _ in pod_claim_refs(obj):
            if claim_name:
                referrers[(pod.namespace, claim_name)].append(uid)
    out: list[PodInfo] = []
    indices: dict[str, tuple[int, ...]] = {}
    pinned: dict[str, str] = {}
    for pod in pods:
        found = objects.get(pod.uid)
        if found is None:
            out.append(pod)
            continue
        obj = found
        key = f"{pod.namespace}/{pod.name}"
        if pod.node is None:
            pending = pod.phase == "Pending"
            out.append(pending_demand(dra, b.claims, pod, obj, b.note) if pending else pod)
            continue
        whole, shares, mig, idx = 0, [], dict(pod.mig), []
        standalone: list[str] = []
        claims = [(c, False) for _, c, _ in pod_claim_refs(obj) if c]
        extended = ((obj.get("status") or {}).get("extendedResourceClaimStatus") or {}).get(
            "resourceClaimName"
        )
        if extended:
            claims.append((str(extended), True))
        for claim_name, is_extended in claims:
            claim = b.claims.get((pod.namespace, claim_name))
            if claim is None or not claim.allocated:
                continue
            if holder(claim, referrers[(pod.namespace, claim_name)]) != pod.uid:
                continue
            for alloc in claim.allocated:
                dev = b.devices.get(alloc.key)
                if alloc.admin:
                    continue
                if dev is None:
                    b.note(f"claim {pod.namespace}/{claim_name}: device {'/'.join(alloc.key)} "
                           "not in any complete ResourceSlice pool")  # fmt: skip
                    continue
                if dev.is_mig and not is_extended:
                    mig[dev.profile] = mig.get(dev.profile, 0) + 1
                elif dev.is_gpu:
                    if dev.key in b.index:
                        idx.append(b.index[dev.key])
                    if is_extended:
                        continue
                    s = b.share(alloc, dev)
                    if s >= 1.0 - 1e-9:
                        whole += 1
                    else:
                        shares.append(s)
                else:
                    continue
                others = {u for u in claim.reserved_for if u in active and u != pod.uid}
                if claim.owner_pod_uid != pod.uid and not is_extended and others:
                    standalone.append(f"{pod.namespace}/{claim_name}")
        if standalone:
            pinned[key] = (
                f"holds devices through standalone ResourceClaim "
                f"{', '.join(sorted(set(standalone)))}, which other running pods also "
                "reserve: it stays allocated, so evicting this pod frees none of them"
            )
        if idx:
            indices[key] = tuple(sorted(set(idx)))
        if not (whole or shares or mig != dict(pod.mig) or standalone):
            out.append(pod)
            continue
        changes: dict[str, Any] = {"gpu_request": pod.gpu_request + whole, "mig": mig}
        if shares and pod.gpu_fraction is None:
            if len(set(round(s, 6) for s in shares)) > 1:
                b.note(f"pod {key}: shares of unequal size {shares}, counted as the largest")
            changes["gpu_fraction"] = max(shares)
            changes["fraction_devices"] = len(shares)
        if standalone:
            held = ",".join(sorted(set(standalone)))
            changes["annotations"] = {**pod.annotations, STANDALONE_CLAIMS_ANNOTATION: held}
        out.append(replace(pod, **changes))
    for holder_record, gpus in _unreserved_claims(b, holder, referrers):
        out.append(holder_record)
        if gpus:
            indices[f"{holder_record.namespace}/{holder_record.name}"] = gpus
    for line in [*b.notes, *(f"pool {p} left out" for p in dra.skipped_pools)]:
        _say_once(line)
    return DraApplied(new_nodes, tuple(out), indices, pinned, tuple(b.notes))


def claim_holder(pod: PodInfo) -> bool:
    """Whether the record stands for an allocated claim no running pod holds
    (:func:`_unreserved_claims`), not for a pod."""
    return pod.owner_kind == CLAIM_HOLDER_KIND


def _unreserved_claims(
    b: _Builder, holder: Any, referrers: Mapping[tuple[str, str], list[str]]
) -> list[tuple[PodInfo, tuple[int, ...]]]:
    """One record per node for each allocated claim that no running pod holds (its
    ``reservedFor`` empty, or naming pods gone or finished): kube-scheduler's allocated-devices
    tracker (``dynamicresources/allocateddevices.go``) counts every device of every claim
    with ``status.allocation`` as taken, whoever reserves it, until the allocation is
    cleared; so the devices stay taken here too, held by a record that is no pod
    (:data:`CLAIM_HOLDER_KIND`: never moved, never a workload, never charged to a queue)."""
    out: list[tuple[PodInfo, tuple[int, ...]]] = []
    for (namespace, name), claim in sorted(b.claims.items()):
        if not claim.allocated or holder(claim, referrers.get((namespace, name), [])):
            continue
        per_node: dict[str, dict[str, Any]] = {}
        for alloc in claim.allocated:
            dev = b.devices.get(alloc.key)
            if alloc.admin or dev is None or not dev.node or dev.node not in b.nodes:
                continue
            held = per_node.setdefault(dev.node, {"whole": 0, "shares": [], "mig": {}, "idx": []})
            if dev.is_mig:
                held["mig"][dev.profile] = held["mig"].get(dev.profile, 0) + 1
            elif dev.is_gpu:
                if dev.key in b.index:
                    held["idx"].append(b.index[dev.key])
                share = b.share(alloc, dev)
                if share >= 1.0 - 1e-9:
                    held["whole"] += 1
                else:
                    held["shares"].append(share)
        for node, held in sorted(per_node.items()):
            if not (held["whole"] or held["shares"] or held["mig"]):
                continue
            b.note(
                f"ResourceClaim {namespace}/{name} is allocated on node {node} but no running "
                "pod reserves it: its devices stay taken until the allocation is cleared"
            )
            record = PodInfo(
                namespace=namespace,
                name=f"{CLAIM_HOLDER_PREFIX}{name}",
                uid=f"{CLAIM_HOLDER_PREFIX}{claim.uid or namespace + '/' + name}",
                node=node,
                phase="Running",
                start_time=None,
                owner_kind=CLAIM_HOLDER_KIND,
                owner_name=name,
                gpu_request=held["whole"],
                gpu_fraction=max(held["shares"]) if held["shares"] else None,
                fraction_devices=len(held["shares"]) or 1,
                mig=held["mig"],
                protected=True,
            )
            out.append((record, tuple(sorted(set(held["idx"])))))
    return out


def apply_object_set(
    nodes: Sequence[NodeInfo],
    pods: Sequence[PodInfo],
    pod_objects: Iterable[Mapping[str, Any]],
    objects: Any,
) -> DraApplied:
    """:func:`apply_dra` with the DRA objects of an ``--objects``
    :class:`~gpuscope.core.kube_objects.ObjectSet` (None or none there: records unchanged)."""
    from gpuscope.collector.cluster.dra_records import dra_from_object_set

    dra = dra_from_object_set(objects) if objects else DraObjects()
    if not dra:
        return DraApplied(tuple(nodes), tuple(pods))
    return apply_dra(nodes, pods, pod_objects, dra)
