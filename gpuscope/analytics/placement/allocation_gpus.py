"""Which GPUs of its node each pod holds, where Kubernetes does not say.

Kubernetes records on which *node* a pod runs but not on which of its GPUs; the agents know
it (pod-resources), a ``kubectl get -o json`` file does not. :func:`assign_gpus` puts every
pod of one node on GPUs:

1. pods whose GPU indices the agents reported take exactly those GPUs;
2. whole-GPU pods take fully free GPUs, lowest index first;
3. fractional pods (each device of a multi-device fraction on a different GPU) are placed
   so that **no GPU holds more than it has** and **as many GPUs as possible are touched**:
   largest fraction first onto the emptiest GPU with room (worst fit). Where that leaves a
   fraction without room although a valid packing exists (0.5, 0.5, 0.4, 0.3, 0.3 on two
   GPUs), a bounded depth-first search finds one, so capacity is never invented: the
   scheduler cannot have over-committed a GPU, and neither does the reconstruction.

Why spread rather than best fit: without indices the truth is unknown, and the placement
that keeps the fewest GPUs whole is the only one that never claims more whole free GPUs
than the cluster really has (every real placement touches at most as many GPUs). A
"placeable" figure that is too high tells a user a job fits when it does not; one that is
too low errs on the side the scheduler would. Where the node really is over-committed (its
pods ask for more than it has) the remaining demand is clamped at 0 free and logged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: Shares closer than this are equal (fractions like 1/3 do not add up exactly).
EPS = 1e-9
#: Depth-first steps tried per node before the reconstruction gives up on a valid packing.
SEARCH_BUDGET = 20_000


@dataclass(frozen=True, slots=True)
class Holder:
    """One pod's GPU demand on a node: ``count`` devices of ``share`` each."""

    key: str
    count: int
    share: float

    @property
    def whole(self) -> bool:
        return self.share >= 1.0 - EPS


def assign_gpus(
    size: int, holders: Sequence[Holder], known: Mapping[str, Sequence[int]] | None = None
) -> tuple[list[float], dict[str, tuple[int, ...]]]:
    """The free share of each of the node's ``size`` GPUs once every holder is placed, and
    the GPU indices each holder takes (module docstring: how)."""
    known = known or {}
    free = [1.0] * size
    taken: dict[str, tuple[int, ...]] = {}
    rest: list[Holder] = []
    for h in holders:
        idx = tuple(sorted({i for i in known.get(h.key, ()) if 0 <= i < size}))
        if idx:
            for i in idx:
                free[i] = max(0.0, free[i] - h.share)
            taken[h.key] = idx
        else:
            rest.append(h)
    for h in sorted((h for h in rest if h.whole), key=lambda h: h.key):
        chosen = [i for i, f in enumerate(free) if f >= 1.0 - EPS][: h.count]
        if len(chosen) < h.count:  # over-committed: the most free of the others, clamped
            others = sorted((i for i in range(size) if i not in chosen), key=lambda i: -free[i])
            chosen += others[: h.count - len(chosen)]
            log.debug("node over-committed: whole-GPU pod=%s clamped", h.key)
        for i in chosen:
            free[i] = 0.0
        taken[h.key] = tuple(sorted(chosen))
    fractions = sorted((h for h in rest if not h.whole), key=lambda h: (-h.share, h.key))
    placed = _spread(free, fractions) or _search(free, fractions)
    if placed is None:
        log.debug("node over-committed: fractions clamped, pods=%d", len(fractions))
        placed = _spread(free, fractions, clamp=True)
        assert placed is not None  # clamping always places
    for h, idx in zip(fractions, placed, strict=True):
        for i in idx:
            free[i] = max(0.0, free[i] - h.share)
        taken[h.key] = idx
    return [round(f, 9) for f in free], taken


def _spread(
    free: Sequence[float], holders: Sequence[Holder], *, clamp: bool = False
) -> list[tuple[int, ...]] | None:
    """Worst fit: each device on the emptiest GPU that holds it (ties: lowest index)."""
    left = list(free)
    out: list[tuple[int, ...]] = []
    for h in holders:
        order = sorted(range(len(left)), key=lambda i: (-left[i], i))
        chosen = [i for i in order if left[i] >= h.share - EPS][: h.count]
        if len(chosen) < h.count:
            if not clamp:
                return None
            chosen += [i for i in order if i not in chosen][: h.count - len(chosen)]
        for i in chosen:
            left[i] = max(0.0, left[i] - h.share)
        out.append(tuple(sorted(chosen)))
    return out


def _search(free: Sequence[float], holders: Sequence[Holder]) -> list[tuple[int, ...]] | None:
    """A valid packing by depth-first search (emptiest GPUs tried first), or None when there
    is none or the budget runs out."""
    left = list(free)
    out: list[tuple[int, ...]] = []
    budget = [SEARCH_BUDGET]

    def combos(share: float, count: int, start: int, chosen: list[int]) -> list[list[int]]:
        if len(chosen) == count:
            return [list(chosen)]
        found: list[list[int]] = []
        for i in range(start, len(left)):
            if left[i] >= share - EPS:
                found += combos(share, count, i + 1, [*chosen, i])
        return found

    def go(j: int) -> bool:
        if j == len(holders):
            return True
        budget[0] -= 1
        if budget[0] < 0:
            return False
        h = holders[j]
        options = combos(h.share, h.count, 0, [])
        options.sort(key=lambda c: (-sum(left[i] for i in c), c))
        seen: set[tuple[float, ...]] = set()
        for c in options:
            shape = tuple(sorted(round(left[i], 9) for i in c))
            if shape in seen:  # the same free shares: the same subtree
                continue
            seen.add(shape)
            for i in c:
                left[i] -= h.share
            out.append(tuple(c))
            if go(j + 1):
                return True
            out.pop()
            for i in c:
                left[i] += h.share
        return False

    return out if go(0) else None
