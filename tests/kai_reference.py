"""A reference for KAI-Scheduler's fair share of GPUs per queue, written in the tests from
KAI's source (NVIDIA/KAI-Scheduler) and sharing no code with gpuscope:

* ``pkg/scheduler/plugins/proportion/proportion.go``: a job's GPUs count towards its
  queue's Request (pending and allocated alike) and Allocated, up the parent chain;
  ``setFairShareForQueues`` divides the total among the top queues, then each queue's
  fair share among its children;
* ``resource_division/resource_division.go``: ``setDeservedResource`` (min of deserved and
  the requestable share), ``divideUpToFairShare`` (rounds by share weight among queues
  still asking, ``nWeight + kValue * (nWeight - usage)``, floored parts, the fraction
  remembered), ``divideRemainingResource`` (one unit at a time to the largest remembered
  fraction, then the older queue, then the UID);
* ``resource_share/resource_share.go``: ``GetRequestableShare`` (request capped by the
  limit), ``isQueueSatisfied``.

Usage history is taken as none (no usage database), so ``usage`` is 0 in the weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

K_VALUE = 1.0


@dataclass
class KQueue:
    name: str
    parent: str | None
    deserved: float
    limit: float | None  # None: unlimited (-1)
    weight: float
    created: int
    #: GPUs of its own jobs, running and pending.
    own_request: float = 0.0


def fair_shares(queues: list[KQueue], total: float) -> dict[str, float]:
    by_name = {q.name: q for q in queues}
    request = {q.name: 0.0 for q in queues}
    for q in queues:  # each job's GPUs up the parent chain
        node: KQueue | None = q
        while node is not None:
            request[node.name] += q.own_request
            node = by_name.get(node.parent) if node.parent else None
    share = {q.name: 0.0 for q in queues}

    def requestable(n: str) -> float:
        lim = by_name[n].limit
        return request[n] if lim is None else min(lim, request[n])

    def still_asks(n: str) -> float:
        r = requestable(n)
        return 0.0 if r < share[n] else r - share[n]

    def satisfied(n: str) -> bool:
        lim = by_name[n].limit
        return request[n] <= share[n] or (lim is not None and lim <= share[n])

    def level(names: list[str], amount: float) -> None:
        left = amount
        for n in names:
            give = min(by_name[n].deserved, requestable(n))
            share[n] += give
            left -= give
        if left <= 0:
            return
        kept: dict[str, float] = {}
        while True:
            round_amount = left
            if len(names) == 1:
                share[names[0]] += left
                left = 0
                break
            asking_weight = sum(by_name[n].weight for n in names if still_asks(n) > 0)
            if asking_weight == 0:
                break
            sw = {}
            for n in names:
                if not satisfied(n):
                    nw = by_name[n].weight / asking_weight
                    sw[n] = max(0.0, nw + K_VALUE * (nw - 0.0))
            sw_sum = sum(sw.values())
            if sw_sum == 0:
                break
            another = False
            for n in names:
                if left == 0:
                    break
                if satisfied(n):
                    continue
                wants = still_asks(n)
                if by_name[n].weight == 0:
                    continue
                part = round_amount * (sw[n] / sw_sum)
                if wants <= part:
                    give = wants
                    kept.pop(n, None)
                else:
                    give = 0.0
                    if math.floor(part) > 0:
                        give = float(math.floor(part))
                    if part - give > 0:
                        kept[n] = part - give
                if give == 0:
                    continue
                share[n] += give
                left -= give
                another = another or wants < part
            if not another or left == 0:
                break
        for n in sorted(kept, key=lambda n: (-kept[n], by_name[n].created, n)):
            if left == 0:
                break
            give = min(1.0, left)
            share[n] += give
            left -= give

    def divide(names: list[str], amount: float) -> None:
        if not names:
            return
        level(names, amount)
        for n in names:
            divide([q.name for q in queues if q.parent == n], share[n])

    divide([q.name for q in queues if not q.parent], total)
    return share
