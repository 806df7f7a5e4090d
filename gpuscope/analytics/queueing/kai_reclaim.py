"""KAI-Scheduler's reclaim: which pending job of which queue may take GPUs back from which
other queues' jobs (docs/analytics.md, Queues, "KAI-Scheduler reclaim").

From NVIDIA/KAI-Scheduler (the 2025 release whose ``reclaimable.go`` has no victim
pre-filter and no steady fair share):

* ``pkg/scheduler/plugins/proportion/reclaimable/reclaimable.go`` ``CanReclaimResources``:
  a job may reclaim only if its queue's allocated GPUs plus its request stay within the
  queue's *fair share* (:mod:`gpuscope.analytics.queueing.kai_share`); a non-preemptible
  job (priority 100 and above) also needs the queue's non-preemptible GPUs plus the request
  within its deserved quota;
* ``Reclaimable``: for the victims of each queue, the two queues just below their lowest
  common ancestor (``getLeveledQueues``; the top queues themselves when none) are compared,
  victim by victim, with the victim's side's GPUs still allocated before that victim goes
  (``strategies.go``): ``MaintainFairShare``, that side above its allocatable share
  (``max(deserved, fair share)``, capped by ``limit``), or ``GuaranteeDeservedQuota``, the
  reclaimer's side within its deserved quota with the request and the victim's side above
  its deserved quota; each victim then leaves its queue and every ancestor;
* ``reclaimingQueuesRemainWithinBoundaries``: the reclaimer's queue and each ancestor, with
  the victims gone from those that lose some and the request added, stay within their
  fair share (a top queue is exempt when it is the only one), and, for a non-preemptible
  job, their non-preemptible GPUs plus the request within their deserved quota;
* ``pkg/scheduler/actions/reclaim/reclaim.go`` and the job solver: victims are
  preemptible running jobs (priority below 100) of other queues, added one by one
  (accumulated) until the GPUs free and freed cover the request and the set passes the
  checks above.

gpuscope's simplifications: GPUs only, pooled (no node placement: KAI's solver also
places the job), victim order by queue from the most allocated per fair share down (then
by name), within a queue lowest priority then most recently started first; victim
queues are checked in name order (KAI iterates a map); with no cluster capacity known the
deserved quota stands in for the fair share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuscope.analytics.queueing.queue_preemption import Choice, Job

EPSILON = 1e-6
#: KAI: workloads of priority 100 and above (``build``, ``inference``) are not preemptible.
NON_PREEMPTIBLE_PRIORITY = 100


@dataclass(frozen=True, slots=True)
class KaiQueue:
    name: str
    parent: str
    deserved: float
    #: ``limit``; None for none.
    limit: float | None
    fair_share: float

    @property
    def allocatable(self) -> float:
        """``GetAllocatableShare``: the larger of deserved and fair share, within the limit."""
        share = max(self.deserved, self.fair_share)
        return share if self.limit is None else min(self.limit, share)


class _Tree:
    def __init__(self, queues: Mapping[str, KaiQueue], running: Mapping[str, Sequence[Job]]):
        self.queues = queues
        self.allocated: dict[str, float] = dict.fromkeys(queues, 0.0)
        self.fixed: dict[str, float] = dict.fromkeys(queues, 0.0)
        for name, jobs in running.items():
            for node in self.path(name):
                self.allocated[node] += sum(j.gpus for j in jobs)
                self.fixed[node] += sum(
                    j.gpus for j in jobs if j.priority >= NON_PREEMPTIBLE_PRIORITY
                )

    def path(self, name: str) -> list[str]:
        """``name`` and its ancestors, leaf first."""
        out: list[str] = []
        while name in self.queues and name not in out:
            out.append(name)
            name = self.queues[name].parent
        return out

    def leveled(self, a: str, b: str) -> tuple[str, str]:
        top_a, top_b = self.path(a)[::-1], self.path(b)[::-1]
        pair = (top_a[0], top_b[0])
        for x, y in zip(top_a, top_b, strict=False):
            pair = (x, y)
            if x != y:
                break
        return pair


def kai_reclaim(
    name: str,
    job: Job,
    free: float,
    queues: Mapping[str, KaiQueue],
    running: Mapping[str, Sequence[Job]],
) -> Choice:
    """The jobs KAI's reclaim would evict so that ``job`` of queue ``name`` can run, with
    ``free`` GPUs already free (module docstring); no victims, with the rule, when none."""
    tree = _Tree(queues, running)
    me = queues[name]
    fixed = job.priority >= NON_PREEMPTIBLE_PRIORITY
    mine = tree.allocated[name]
    if mine + job.gpus > me.fair_share + EPSILON or (
        fixed and tree.fixed[name] + job.gpus > me.deserved + EPSILON
    ):
        also = f" (or its deserved quota {me.deserved:g}: not preemptible)" if fixed else ""
        return Choice(
            (),
            (),
            "kai.over_fair_share",
            f"KAI Queue {name}: {mine:g} allocated + {job.gpus:g} asked is beyond its fair "
            f"share {me.fair_share:g}{also} and only {free:g} GPUs are free: it may not reclaim",
        )

    def ratio(q: str) -> float:
        share = queues[q].fair_share
        return tree.allocated[q] / share if share > EPSILON else float("inf")

    order = sorted(
        (
            (q, v)
            for q, jobs in running.items()
            if q != name
            for v in jobs
            if v.priority < NON_PREEMPTIBLE_PRIORITY
        ),
        key=lambda c: (
            -ratio(c[0]),
            c[0],
            c[1].priority,
            -c[1].start_time,
            c[1].namespace,
            c[1].job,
        ),
    )
    taken: list[tuple[str, Job]] = []
    freed = 0.0
    for q, v in order:
        taken.append((q, v))
        freed += v.gpus
        if free + freed + EPSILON >= job.gpus and _reclaimable(tree, name, job, fixed, taken):
            victims = tuple(j for _, j in taken)
            return Choice(
                victims,
                tuple(taken),
                "kai.reclaim",
                f"KAI Queue {name} stays within its fair share {me.fair_share:g} with the "
                f"job: KAI reclaims {freed:g} GPUs as {len(victims)} whole preemptible "
                "job(s) from queues over their fair share or deserved quota",
            )
    return Choice(
        (),
        (),
        "kai.reclaim_blocked",
        f"KAI Queue {name} is within its fair share {me.fair_share:g} with the job, but "
        "no set of other queues' preemptible jobs (priority below 100) that frees "
        f"{job.gpus - free:g} GPUs passes KAI's reclaim strategies",
    )


def _reclaimable(
    tree: _Tree, name: str, job: Job, fixed: bool, taken: Sequence[tuple[str, Job]]
) -> bool:
    queues = tree.queues
    remaining: dict[str, float] = {}
    by_queue: dict[str, list[Job]] = {}
    for q, v in taken:
        by_queue.setdefault(q, []).append(v)
    for q in sorted(by_queue):
        mine, theirs = tree.leveled(name, q)
        remaining.setdefault(theirs, tree.allocated[theirs])
        for v in by_queue[q]:
            left = remaining[theirs]
            fair = left > queues[theirs].allocatable + EPSILON
            deserved = (
                tree.allocated[mine] + job.gpus <= queues[mine].deserved + EPSILON
                and left > queues[theirs].deserved + EPSILON
            )
            if not (fair or deserved):
                return False
            for node in tree.path(q):
                remaining[node] = remaining.get(node, tree.allocated[node]) - v.gpus
    tops = sum(1 for qq in queues.values() if qq.parent not in queues)
    for node in tree.path(name):
        after = remaining.get(node, tree.allocated[node]) + job.gpus
        top = queues[node].parent not in queues
        if (not top or tops > 1) and after > queues[node].fair_share + EPSILON:
            return False
        if fixed and tree.fixed[node] + job.gpus > queues[node].deserved + EPSILON:
            return False
    return True
