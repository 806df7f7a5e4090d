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


# -- reclaim -------------------------------------------------------------------------------
@dataclass
class KJob:
    queue: str
    name: str
    gpus: float
    priority: int
    #: Order of starting (larger: more recent); pending jobs the model admits start last.
    started: float = 0.0


class KaiReclaim:
    """KAI's reclaim decision for pending jobs judged one by one, from
    ``pkg/scheduler/plugins/proportion/reclaimable/reclaimable.go`` (CanReclaimResources,
    Reclaimable, reclaimResourcesFromReclaimees, subtractReclaimedResources,
    reclaimingQueuesRemainWithinBoundaries, getLeveledQueues),
    ``reclaimable/strategies/strategies.go`` (MaintainFairShare: the reclaimee side above
    its allocatable share, ``resource_share.go`` GetAllocatableShare = min(limit,
    max(deserved, fair share)); GuaranteeDeservedQuota: the reclaimer side within deserved
    with the request, the reclaimee side above deserved) and
    ``pkg/scheduler/actions/reclaim/reclaim.go`` with the accumulating scenario builder
    (``solvers/pod_scenario_builder.go``): victims are other queues' preemptible running
    jobs (priority below 100), added one at a time until the GPUs free and freed cover the
    request and the whole set is reclaimable. The victim order is gpuscope's documented
    reading of KAI's reversed queue order (most allocated per fair share first, then the
    name; in a queue the lowest priority, then the most recent); node placement is not
    simulated."""

    def __init__(self, queues: list[KQueue], shares: dict[str, float], running: list[KJob]):
        self.q = {x.name: x for x in queues}
        self.share = shares
        self.running = list(running)

    def chain(self, name: str) -> list[str]:
        out = [name]
        while self.q[out[-1]].parent in self.q:
            out.append(self.q[out[-1]].parent or "")
        return out

    def alloc(self, name: str, fixed: bool = False) -> float:
        return sum(j.gpus for j in self.running if name in self.chain(j.queue)
                   and (not fixed or j.priority >= 100))  # fmt: skip

    def allocatable(self, name: str) -> float:
        x = self.q[name]
        top = max(x.deserved, self.share[name])
        return top if x.limit is None else min(x.limit, top)

    def judge(self, queue: str, job: KJob, free: float) -> tuple[str, list[str], float]:
        """(outcome, victim names, free GPUs after) for one pending job."""
        x = self.q[queue]
        own = sum(j.gpus for j in self.running if j.queue == queue)
        if x.limit is not None and own + job.gpus > max(x.limit, x.deserved) + 1e-6:
            return "limit", [], free
        if job.gpus <= free + 1e-6:
            self.running.append(KJob(queue, job.name, job.gpus, job.priority, math.inf))
            return "fits", [], free - job.gpus
        fixed = job.priority >= 100
        if self.alloc(queue) + job.gpus > self.share[queue] + 1e-6:
            return "over_fair_share", [], free
        if fixed and self.alloc(queue, True) + job.gpus > x.deserved + 1e-6:
            return "over_fair_share", [], free

        def ratio(n: str) -> float:
            return self.alloc(n) / self.share[n] if self.share[n] > 1e-6 else math.inf

        pool = sorted((j for j in self.running if j.queue != queue and j.priority < 100),
                      key=lambda j: (-ratio(j.queue), j.queue, j.priority, -j.started, j.name))  # fmt: skip
        chosen: list[KJob] = []
        for v in pool:
            chosen.append(v)
            if free + sum(c.gpus for c in chosen) + 1e-6 >= job.gpus and self.ok(
                queue, job, chosen
            ):
                for c in chosen:
                    self.running.remove(c)
                self.running.append(KJob(queue, job.name, job.gpus, job.priority, math.inf))
                freed = sum(c.gpus for c in chosen)
                return "reclaim", sorted(c.name for c in chosen), free + freed - job.gpus
        return "blocked", [], free

    def leveled(self, a: str, b: str) -> tuple[str, str]:
        pa, pb = self.chain(a)[::-1], self.chain(b)[::-1]
        ra, rb = pa[0], pb[0]
        for i in range(min(len(pa), len(pb))):
            ra, rb = pa[i], pb[i]
            if ra != rb:
                break
        return ra, rb

    def ok(self, queue: str, job: KJob, chosen: list[KJob]) -> bool:
        left: dict[str, float] = {}
        for vq in sorted({c.queue for c in chosen}):
            r, e = self.leveled(queue, vq)
            if e not in left:
                left[e] = self.alloc(e)
            for v in [c for c in chosen if c.queue == vq]:
                keeps_fair = left[e] > self.allocatable(e) + 1e-6
                guarantee = (self.alloc(r) + job.gpus <= self.q[r].deserved + 1e-6
                             and left[e] > self.q[e].deserved + 1e-6)  # fmt: skip
                if not (keeps_fair or guarantee):
                    return False
                for n in self.chain(vq):
                    left[n] = left.get(n, self.alloc(n)) - v.gpus
        tops = [n for n, x in self.q.items() if x.parent not in self.q]
        for n in self.chain(queue):
            total = left.get(n, self.alloc(n)) + job.gpus
            is_top = self.q[n].parent not in self.q
            if (not is_top or len(tops) > 1) and total > self.share[n] + 1e-6:
                return False
            if job.priority >= 100 and self.alloc(n, True) + job.gpus > self.q[n].deserved + 1e-6:
                return False
        return True
