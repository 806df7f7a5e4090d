"""Placement policies: each scores a node for a pod; the engine takes the best score.

Scores follow the schedulers they name (integer scores, higher is better). Ties among the
best nodes are broken as each scheduler breaks them (:data:`TIES`): uniformly at random
for the Kubernetes policies, as kube-scheduler's ``selectHost`` does; by inventory order
(the first best node) for the FGD simulator's policies, as its published results imply:
with random ties its FGD reaches 90.6 % on the openb trace at 130 % arrivals instead of
the 95.4 % it reports, with first-node ties 95.3 % (docs/analytics.md, What-if).

- ``leastallocated``: kube-scheduler's default ``NodeResourcesFit`` scoring as users run
  it, ``LeastAllocated`` over cpu and memory (weight 1 each) plus the GPU as an extended
  resource (weight 1): per resource ``(allocatable - requested) * 100 // allocatable``
  with the pod included, averaged; a pod that requests no CPU or memory counts 100m and
  200 MiB there, as the scheduler's non-zero defaults do. Spreads.
- ``mostallocated``: the same with ``requested * 100 // allocatable``. Packs.
- ``bestfit``, ``dotprod``, ``random``, ``fgd``: the FGD simulator's plugins
  (``best_fit_score.go``, ``dot_product_score.go`` with its ``merge``/``max``
  configuration, ``random_score.go``, ``fgd_score.go``): BestFit
  ``100 * (1 - (0.5 * cpu_left/128000 + 0.5 * gpu_left/8000))`` after placement;
  DotProduct ``100 * (1 - (node_left . request) / 2)`` with CPU and GPU normalised by
  128 cores and 8 GPUs; FGD ``100 * sigmoid(F_before - F_after)``, F the node's FGD
  fragmentation (in GPUs) under the workload's task mix, the detector's own
  :func:`gpuscope.analytics.placement.fragmentation.fgd_node`.

Which GPU of the node a pod takes: whole GPUs are the lowest-indexed fully free ones
(the simulator's ``AllocateExclusiveGpuId``, and the device plugin's usual order); a
fractional device goes to the tightest GPU that holds it (``best``, the simulator's
choice for BestFit and DotProduct and our choice for the Kubernetes policies), to a
random one for ``random``, and for ``fgd`` to the GPU whose use leaves the least
fragmentation (first index on equal integer score, as ``fgd_score.go``).
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuscope.analytics.placement.allocation import NodeState
from gpuscope.analytics.placement.fragmentation import TaskMix, fgd_node
from gpuscope.analytics.whatif.events import MILLI, Request
from gpuscope.analytics.whatif.nodes import Signature, state_of

POLICIES = ("leastallocated", "mostallocated", "bestfit", "dotprod", "random", "fgd")
#: The FGD simulator's normalisation constants (``MaxSpecCpu``, ``MaxSpecGpu``).
MAX_SPEC_CPU = 128_000
MAX_SPEC_GPU = 8 * MILLI
#: kube-scheduler's non-zero request defaults for scoring (100m CPU, 200 MiB memory).
NONZERO_CPU, NONZERO_MEMORY = 100, 200
MAX_SCORE = 100


@dataclass(slots=True)
class Context:
    """What scoring needs beyond the node: the task mix, a seeded RNG, memoised FGD.

    The FGD measure sees a node's free CPU and memory only through whether each task of
    the mix fits in them, so :meth:`frag` memoises on the signature with free CPU and
    memory lowered to the largest demand of the mix that still fits (:func:`fit_class`):
    nodes that differ by a few cores no task of the mix can tell apart share one value,
    exactly the one each would get alone."""

    mix: TaskMix
    rng: random.Random
    frag_cache: dict[Signature, float] = field(default_factory=dict)
    cpu_steps: tuple[int, ...] = ()
    memory_steps: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        self.cpu_steps = tuple(sorted({t.cpu_milli for t in self.mix.tasks}))
        self.memory_steps = tuple(sorted({t.memory_mib for t in self.mix.tasks}))

    def frag(self, template: NodeState, sig: Signature) -> float:
        key = (
            sig[0],
            fit_class(sig[1], self.cpu_steps),
            fit_class(sig[2], self.memory_steps),
            sig[3],
            sig[4],
        )
        value = self.frag_cache.get(key)
        if value is None:
            value = self.frag_cache[key] = fgd_node(state_of(template, key), self.mix)
        return value


def fit_class(free: int, steps: Sequence[int]) -> int:
    """The largest of the sorted ``steps`` (the mix's demands) that ``free`` holds, or -1
    where it holds none: every demand fits in the result exactly where it fits in
    ``free``."""
    i = bisect.bisect_right(steps, free)
    return steps[i - 1] if i else -1


def has_free(template: NodeState, sig: Signature, req: Request) -> bool:
    """Whether a node of this kind with this signature has the pod's resources free: free
    CPU, memory and storage as :func:`~gpuscope.analytics.placement.allocation.has_room`
    has them (memory and storage only where the node reports them), its MIG instances,
    and ``gpu_count`` GPUs each with the share free. Admission (readiness, taints, model,
    labels) is the node's kind's, not its state's: the caller checks it once per kind."""
    task = req.task
    if task.cpu_milli > sig[1]:
        return False
    if template.memory_mib_total and task.memory_mib > sig[2]:
        return False
    if template.ephemeral_mib_total and task.ephemeral_mib > template.ephemeral_mib_free:
        return False
    if req.mig:
        free = dict(sig[4])
        if any(free.get(p, 0) < c for p, c in req.mig):
            return False
    if task.gpu_count:
        share = req.share_milli
        return sum(1 for g in sig[3] if g >= share) >= task.gpu_count
    return True


def take(
    gpus: Sequence[int],
    req: Request,
    how: str,
    ctx: Context | None = None,
    template: NodeState | None = None,
    kind_sig: Signature | None = None,
) -> list[int]:
    """GPU indices the pod takes on a node whose GPUs have ``gpus`` free (module
    docstring: which); ``how`` is ``best``, ``random`` or ``fgd``."""
    count, share = req.task.gpu_count, req.share_milli
    if count == 0:
        return []
    if share >= MILLI:
        return [i for i, g in enumerate(gpus) if g >= MILLI][:count]
    if how == "fgd" and count == 1 and ctx is not None and template is not None:
        assert kind_sig is not None
        before = ctx.frag(template, kind_sig)
        best_i, best_score = -1, -1
        for i, g in enumerate(gpus):
            if g >= share:
                after = list(gpus)
                after[i] -= share
                score = _sigmoid_score(before - ctx.frag(template, _with(kind_sig, after)))
                if score > best_score:
                    best_i, best_score = i, score
        return [best_i]
    left = list(gpus)
    chosen: list[int] = []
    for _ in range(count):
        room = [i for i, g in enumerate(left) if g >= share and i not in chosen]
        if how == "random" and ctx is not None:
            i = room[ctx.rng.randrange(len(room))]
        else:
            i = min(room, key=lambda j: (left[j], j))
        chosen.append(i)
        left[i] -= share
    return sorted(chosen)


def after_gpus(gpus: Sequence[int], idx: Sequence[int], share: int) -> list[int]:
    out = list(gpus)
    for i in idx:
        out[i] -= share
    return out


def _with(
    sig: Signature,
    gpus: Sequence[int],
    cpu: int | None = None,
    memory: int | None = None,
    mig: tuple[tuple[str, int], ...] | None = None,
) -> Signature:
    return (
        sig[0],
        sig[1] if cpu is None else cpu,
        sig[2] if memory is None else memory,
        tuple(sorted(gpus)),
        sig[4] if mig is None else mig,
    )


def after_signature(sig: Signature, req: Request, idx: Sequence[int]) -> Signature:
    """The signature once the pod takes GPUs ``idx`` of the sorted GPU tuple."""
    mig = sig[4]
    if req.mig:
        free = dict(mig)
        for p, c in req.mig:
            free[p] -= c
        mig = tuple(sorted(free.items()))
    return _with(
        sig,
        after_gpus(sig[3], idx, req.share_milli),
        cpu=sig[1] - req.task.cpu_milli,
        memory=sig[2] - req.task.memory_mib if sig[2] else sig[2],
        mig=mig,
    )


def _sigmoid_score(delta: float) -> int:
    return int(MAX_SCORE / (1.0 + math.exp(-delta)))


def _fgd(template: NodeState, sig: Signature, req: Request, ctx: Context) -> int:
    before = ctx.frag(template, sig)
    if req.task.gpu_count == 1 and req.share_milli < MILLI:
        best = -1
        for value in sorted(set(sig[3])):
            if value >= req.share_milli:
                i = sig[3].index(value)
                after = ctx.frag(template, after_signature(sig, req, [i]))
                best = max(best, _sigmoid_score(before - after))
        return best
    idx = take(sig[3], req, "best")
    return _sigmoid_score(before - ctx.frag(template, after_signature(sig, req, idx)))


def _k8s(template: NodeState, sig: Signature, req: Request, most: bool) -> int:
    task = req.task
    parts: list[tuple[int, int]] = [
        (
            template.cpu_milli_total,
            template.cpu_milli_total - sig[1] + (task.cpu_milli or NONZERO_CPU),
        )
    ]
    if template.memory_mib_total:
        used = template.memory_mib_total - sig[2] + (task.memory_mib or NONZERO_MEMORY)
        parts.append((template.memory_mib_total, used))
    if sig[3]:  # the GPU extended resource, where the node has it
        capacity = len(sig[3]) * MILLI
        parts.append((capacity, capacity - sum(sig[3]) + req.gpu_milli))
    total = 0
    for capacity, requested in parts:
        if capacity <= 0 or requested > capacity:
            continue
        total += (
            requested * MAX_SCORE // capacity
            if most
            else ((capacity - requested) * MAX_SCORE // capacity)
        )
    return total // len(parts)


def _bestfit(template: NodeState, sig: Signature, req: Request, ctx: Context) -> int:
    cpu_left = sig[1] - req.task.cpu_milli
    gpu_left = sum(sig[3]) - req.gpu_milli
    waste = 0.5 * cpu_left / MAX_SPEC_CPU + 0.5 * gpu_left / MAX_SPEC_GPU
    return int((1.0 - waste) * MAX_SCORE)


def _dotprod(template: NodeState, sig: Signature, req: Request, ctx: Context) -> int:
    dot = (sig[1] / MAX_SPEC_CPU) * (req.task.cpu_milli / MAX_SPEC_CPU) + (
        sum(sig[3]) / MAX_SPEC_GPU
    ) * (req.gpu_milli / MAX_SPEC_GPU)
    return int(MAX_SCORE * (1.0 - dot / 2))


Scorer = Callable[[NodeState, Signature, Request, Context], int]

SCORERS: dict[str, Scorer] = {
    "leastallocated": lambda t, s, r, c: _k8s(t, s, r, most=False),
    "mostallocated": lambda t, s, r, c: _k8s(t, s, r, most=True),
    "bestfit": _bestfit,
    "dotprod": _dotprod,
    "random": lambda t, s, r, c: 0,
    "fgd": _fgd,
}
#: How each policy breaks ties between equally scored nodes (module docstring).
TIES = {
    "leastallocated": "random",
    "mostallocated": "random",
    "bestfit": "first",
    "dotprod": "first",
    "random": "random",
    "fgd": "first",
}
#: How each policy picks the GPU of a fractional device (module docstring).
GPU_CHOICE = {"random": "random", "fgd": "fgd"}
