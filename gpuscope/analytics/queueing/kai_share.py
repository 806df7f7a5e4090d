"""KAI-Scheduler's fair share of GPUs per queue, as its proportion plugin divides them
(NVIDIA/KAI-Scheduler ``pkg/scheduler/plugins/proportion/proportion.go``
``setFairShareForQueues`` and ``resource_division/resource_division.go``;
docs/analytics.md, "Queues"). Pure: queues in, a fair share per queue out.

* The top-level queues divide the cluster's GPUs (those of ready nodes, less what pods of
  other schedulers hold); each queue's fair share is then divided among its children.
* Among siblings, each first gets its deserved quota, at most what it can use: its request
  (GPUs its jobs hold plus what its pending jobs ask), capped by its ``limit``.
* What is left goes over quota, in rounds, in proportion to ``overQuotaWeight`` among the
  queues that still ask for more (a queue asking no more than its share, or at its limit,
  is satisfied); a queue whose proportional part covers what it still asks gets that,
  otherwise the whole GPUs of its part (rounded down) and the fraction is kept for the
  end; a round is repeated while some queue was given less than its part. A level with
  one queue gives it everything left.
* The fractions kept are handed out one GPU (or what is left) at a time, the largest
  fraction first (then the queue created first, then by name).

gpuscope does not know KAI's queue priorities (all are taken equal) nor its usage
history (the ``kValue`` term then cancels out: shares go by weight alone).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuscope.analytics.queueing.queue_charge import field_of


@dataclass(slots=True)
class ShareQueue:
    name: str
    parent: str
    deserved: float
    #: ``limit``; None for none.
    limit: float | None
    weight: float
    #: GPUs its jobs (and its children's) hold plus what their pending jobs ask.
    request: float = 0.0
    #: Creation time (unix seconds) for the last tie-break; None sorts last.
    created: float | None = None
    fair_share: float = 0.0

    def requestable(self) -> float:
        return self.request if self.limit is None else min(self.limit, self.request)

    def remaining_requested(self) -> float:
        return max(0.0, self.requestable() - self.fair_share)

    def satisfied(self) -> bool:
        return self.request <= self.fair_share or (
            self.limit is not None and self.limit <= self.fair_share
        )


def fair_shares(queues: Mapping[str, ShareQueue], total: float) -> dict[str, float]:
    """Each queue's fair share of ``total`` GPUs. ``request`` is given per queue for its
    own jobs; parents' requests are summed here from their children."""
    children: dict[str, list[ShareQueue]] = {}
    for q in queues.values():
        parent = q.parent if q.parent in queues else ""
        children.setdefault(parent, []).append(q)
    for q in queues.values():
        q.fair_share = 0.0

    def subtree_request(q: ShareQueue) -> float:
        q.request += sum(subtree_request(c) for c in children.get(q.name, ()))
        return q.request

    for top in children.get("", ()):
        subtree_request(top)

    def divide(level: list[ShareQueue], amount: float) -> None:
        if not level:
            return
        _divide_level(level, amount)
        for q in level:
            divide(children.get(q.name, []), q.fair_share)

    divide(children.get("", []), total)
    return {n: q.fair_share for n, q in queues.items()}


def _divide_level(level: list[ShareQueue], total: float) -> None:
    remaining = total
    for q in level:  # deserved first
        amount = min(q.deserved, q.requestable())
        q.fair_share += amount
        remaining -= amount
    if remaining <= 0:
        return
    leftovers: dict[str, tuple[float, ShareQueue]] = {}
    while True:
        if len(level) == 1:
            level[0].fair_share += remaining
            return
        weights = _share_weights(level)
        weight_sum = sum(weights.values())
        if weight_sum == 0:
            break
        again = False
        to_give = remaining
        for q in level:
            if remaining == 0:
                break
            if q.satisfied():
                continue
            requested = q.remaining_requested()
            if q.weight == 0:
                continue
            part = to_give * (weights[q.name] / weight_sum)  # KAI's order of operations
            if requested <= part:
                give = requested
                leftovers.pop(q.name, None)
            else:
                give = math.floor(part) if math.floor(part) > 0 else 0.0
                if part - give > 0:
                    leftovers[q.name] = (part - give, q)
            if give == 0:
                continue
            q.fair_share += give
            remaining -= give
            again = again or requested < part
        if not again or remaining == 0:
            break
    for _, q in sorted(
        leftovers.values(),
        key=lambda e: (-e[0], math.inf if e[1].created is None else e[1].created, e[1].name),
    ):
        if remaining == 0:
            break
        give = min(1.0, remaining)
        q.fair_share += give
        remaining -= give


def _share_weights(level: list[ShareQueue]) -> dict[str, float]:
    """Each unsatisfied queue's weight over the weights of those still asking for more."""
    total = sum(q.weight for q in level if q.remaining_requested() > 0)
    if total == 0:
        return {}
    return {q.name: max(0.0, q.weight / total) for q in level if not q.satisfied()}


def kai_queue_shares(
    records: Mapping[str, Any], demand: Mapping[str, float], total: float
) -> dict[str, float]:
    """Fair shares of KAI Queue records (QuotaInfo or their JSON) whose jobs hold and ask
    ``demand`` GPUs, over ``total`` GPUs (ready nodes' less other schedulers' pods').
    An unset ``overQuotaWeight`` counts as 1, as elsewhere in the queue model."""
    queues = {}
    for name, rec in records.items():
        weight = field_of(rec, "over_quota_weight", None)
        limit = field_of(rec, "limit", None)
        queues[name] = ShareQueue(
            name,
            str(field_of(rec, "cohort", "")),
            float(field_of(rec, "guaranteed_gpus", 0.0)),
            None if limit is None else float(limit),
            1.0 if weight is None else float(weight),
            float(demand.get(name, 0.0)),
            field_of(rec, "created", None),
        )
    return fair_shares(queues, total)
