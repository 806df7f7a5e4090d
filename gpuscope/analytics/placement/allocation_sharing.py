"""Where KAI-Scheduler / Run:ai say a GPU fraction lives, before anything is guessed.

KAI-Scheduler (docs/gpu-sharing, and its binder's resource-reservation service) backs
every shared GPU with a **reservation pod**: a pod in the ``kai-resource-reservation``
namespace (``runai-reservation`` before KAI v0.6, and in Run:ai) bound to the node, asking
``nvidia.com/gpu: 1`` from the device plugin, labelled ``runai-gpu-group=<group>`` and
annotated ``run.ai/reserve_for_gpu_index`` with the GPU it got (its UUID, or an index).
Every fractional pod on that GPU carries the same ``runai-gpu-group`` label (a pod with
fractions on several GPUs: one ``runai-gpu-group/<group>`` label per GPU). So:

- the fractions of one group share one GPU: they are one holder of their summed share;
- the reservation pod of a group with fractions is that GPU's container, not a second
  whole-GPU pod (counting it as well would take a GPU the fractions do not use, and then
  spread the fractions over another one: "whole free 0" on a 2-GPU node with two 0.3
  fractions of one group, where one GPU is whole and free);
- a reservation pod whose fractions are gone (KAI deletes it soon after) holds its GPU;
- an index given (the reservation annotation or Run:ai's ``runai-gpu`` annotation on the
  pod, when it is a number below the node's GPU count) places the holder on that GPU, as
  the agents' indices do; a UUID says which group, not which index, and is not guessed at.

Fractions without a group are placed by
:func:`gpuscope.analytics.placement.allocation_gpus.assign_gpus` (its docstring: spread, never
over-committing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuscope.analytics.placement.allocation_gpus import EPS, Holder, assign_gpus
from gpuscope.collector.cluster.dra_apply import claim_holder
from gpuscope.collector.cluster.inventory_records import PodInfo

#: Namespaces of the schedulers' GPU reservation pods (KAI, Run:ai / KAI before v0.6).
RESERVATION_NAMESPACES = frozenset({"kai-resource-reservation", "runai-reservation"})
GPU_GROUP_LABEL = "runai-gpu-group"
MULTI_GROUP_PREFIX = GPU_GROUP_LABEL + "/"
RESERVED_INDEX_ANNOTATION = "run.ai/reserve_for_gpu_index"
GPU_INDEX_ANNOTATION = "runai-gpu"


@dataclass(frozen=True, slots=True)
class Demand:
    """One pod's GPU demand on its node: ``count`` devices of ``share`` each."""

    key: str
    count: int
    share: float
    pod: PodInfo


def is_reservation(pod: PodInfo) -> bool:
    """A scheduler's GPU reservation pod (module docstring), or the record holding the
    devices of an allocated DRA claim no running pod reserves
    (:func:`gpuscope.collector.cluster.dra_apply.claim_holder`): GPUs taken, not a task."""
    return pod.namespace in RESERVATION_NAMESPACES or claim_holder(pod)


def gpu_groups(pod: PodInfo) -> list[str]:
    """The GPU groups a pod is placed in, one per shared GPU it uses."""
    single = pod.labels.get(GPU_GROUP_LABEL, "")
    multi = sorted(
        v or k[len(MULTI_GROUP_PREFIX) :]
        for k, v in pod.labels.items()
        if k.startswith(MULTI_GROUP_PREFIX)
    )
    return [single] if single else [g for g in multi if g]


def _index(text: str | None, size: int) -> int | None:
    if text is None or not text.strip().isdigit():
        return None
    value = int(text.strip())
    return value if 0 <= value < size else None


def place_node(
    size: int, demands: Sequence[Demand], known: Mapping[str, Sequence[int]] | None = None
) -> tuple[list[float], dict[str, tuple[int, ...]]]:
    """The free share of each of the node's ``size`` GPUs and the GPUs each demand holds,
    fractions of one group on one GPU, reservation pods inside their group (module
    docstring)."""
    known = dict(known or {})
    members: dict[str, list[Demand]] = {}
    reservations: dict[str, list[Demand]] = {}
    plain: list[Demand] = []
    for d in demands:
        groups = gpu_groups(d.pod)
        if is_reservation(d.pod) and groups:
            reservations.setdefault(groups[0], []).append(d)
        elif groups and d.share < 1.0 - EPS and len(groups) == d.count:
            for g in groups:
                members.setdefault(g, []).append(d)
        else:
            plain.append(d)
    holders = [Holder(d.key, d.count, d.share) for d in plain]
    for d in plain:
        index = _index(d.pod.annotations.get(GPU_INDEX_ANNOTATION), size)
        if d.key not in known and index is not None and d.count == 1:
            known[d.key] = [index]
    for group, rsv in sorted(reservations.items()):
        if group not in members:  # its fractions are gone: it holds its GPU
            holders += [Holder(d.key, d.count, d.share) for d in rsv]
    group_key: dict[str, str] = {}
    for group, ds in sorted(members.items()):
        key = group_key[group] = f"{GPU_GROUP_LABEL}:{group}"
        share = min(1.0, sum(d.share for d in ds))
        holders.append(Holder(key, 1, share))
        index = next(
            (
                i
                for d in reservations.get(group, [])
                if (i := _index(d.pod.annotations.get(RESERVED_INDEX_ANNOTATION), size)) is not None
            ),
            None,
        )
        if index is None:
            index = next(
                (
                    i
                    for d in ds
                    if d.count == 1
                    and (i := _index(d.pod.annotations.get(GPU_INDEX_ANNOTATION), size)) is not None
                ),
                None,
            )
        if index is None:
            index = next((known[d.key][0] for d in ds if d.count == 1 and known.get(d.key)), None)
        if index is not None:
            known[key] = [index]
    free, taken = assign_gpus(size, holders, known)
    for group, ds in members.items():
        for d in ds:
            taken[d.key] = tuple(sorted({*taken.get(d.key, ()), *taken[group_key[group]]}))
    for key in group_key.values():
        del taken[key]
    return free, taken
