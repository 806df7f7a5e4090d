"""Kueue's fair sharing: the preemption it does instead of the classic one when its
Configuration says ``fairSharing.enable: true`` (docs/analytics.md, Queues, "Kueue fair
sharing"). gpuscope cannot read that switch from the cluster: it is the
``analytics.kueue_fair_sharing`` setting (with ``kueue_fair_sharing_strategies``).

From kubernetes-sigs/kueue (the release with hierarchical cohorts and
``fairsharing.MakeClusterQueueOrdering``):

* ``pkg/cache/fair_sharing.go`` ``dominantResourceShare``: a node with no parent has share
  0; a weight (``spec.fairSharing.weight`` of a ClusterQueue or Cohort, default 1) of 0
  makes it the largest; otherwise what it borrows (usage beyond its subtree quota, summed
  over the flavors of a resource) over what its parent's subtree holds of that resource,
  times 1000 (integer division), times 1000 over its weight in milli-units;
* ``pkg/scheduler/preemption/preemption.go`` ``findCandidates``: its own queue's jobs as
  ``withinClusterQueue`` allows, and, unless ``reclaimWithinCohort`` is ``Never``, the
  jobs it allows of every other ClusterQueue of its cohort tree that borrows in the
  flavor; ``CandidatesOrdering``: other queues' first, lower priority, most recently
  admitted (then by name: gpuscope's tie-break);
* ``fairPreemptions``, ``runFirstFsStrategy``, ``runSecondFsStrategy``: with the pending
  job's usage counted, queues are visited as ``fairsharing/ordering.go`` orders them
  (from the root, the child with the highest share, a cohort winning a tie with a queue;
  a queue with share 0, other than its own, or without candidates, and a cohort with share
  0 off its path, are dropped; ties between siblings, which Kueue leaves to its map
  order, go to the last by name); its own queue's candidates are taken in turn; another
  queue's first candidate that passes the strategy is taken (then the order is redone):
  ``LessThanOrEqualToFinalShare`` (the share of the preemptor's side below the lowest
  common cohort, with the job, at most the target side's after the removal) or
  ``LessThanInitialShare`` (below the target side's before it); the second strategy, if
  configured, takes one candidate per queue from those the first passed over. Once the
  job fits (borrowing allowed), victims not needed are given back, last first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gpuscope.analytics.queueing.queue_charge import field_of
from gpuscope.analytics.queueing.queue_flavors import Flavors
from gpuscope.analytics.queueing.queue_preemption import Choice, Job, allows
from gpuscope.analytics.queueing.queue_tree import Key

EPSILON = 1e-6
FINAL = "LessThanOrEqualToFinalShare"
INITIAL = "LessThanInitialShare"
#: The share of a node whose weight is 0 (Go's ``math.MaxInt``).
MAX_SHARE = 2**63 - 1


@dataclass(frozen=True, slots=True)
class FairSharing:
    """Kueue's ``fairSharing`` configuration."""

    enabled: bool = False
    strategies: tuple[str, ...] = (FINAL, INITIAL)


def _trunc(a: int, b: int) -> int:
    """Go's integer division (towards zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


class Shares:
    """Dominant resource shares over every GPU flavor's tree (only GPUs are modelled)."""

    def __init__(self, flavors: Flavors, weights: Mapping[Key, float]) -> None:
        self.flavors = flavors
        self.milli = {k: round(w * 1000) for k, w in weights.items()}

    def share(self, key: Key) -> int:
        parent = self.flavors.shape.parent(key)
        if parent is None:
            return 0
        milli = self.milli.get(key, 1000)
        if milli == 0:
            return MAX_SHARE
        trees = self.flavors.trees.values()
        borrowed = sum(max(0.0, t.usage(key) - t.subtree(key)) for t in trees)
        if borrowed <= EPSILON:
            return 0
        lendable = sum(t.subtree(parent) for t in trees)
        ratio = int(borrowed * 1000 // lendable) if lendable > 0 else -1
        return _trunc(ratio * 1000, milli)


def weights_of(
    cluster_queues: Mapping[str, object], cohorts: Mapping[str, object]
) -> dict[Key, float]:
    """``spec.fairSharing.weight`` of each ClusterQueue and Cohort (default 1)."""
    out: dict[Key, float] = {}
    for kind, table in (("cq", cluster_queues), ("cohort", cohorts)):
        for name, rec in table.items():
            weight = field_of(rec, "over_quota_weight", None)
            out[(kind, name)] = 1.0 if weight is None else float(weight)
    return out


class _Ordering:
    """``fairsharing.TargetClusterQueueOrdering`` over the candidates of one preemption."""

    def __init__(self, q: str, flavors: Flavors, shares: Shares, by_queue: dict[str, list[Job]]):
        self.me: Key = ("cq", q)
        self.shape = flavors.shape
        self.shares = shares
        self.by_queue = by_queue
        self.path = set(self.shape.ancestors(self.me))
        self.pruned: set[Key] = set()

    def has(self, key: Key) -> bool:
        return bool(self.by_queue.get(key[1]))

    def target(self) -> Key | None:
        """The next queue to take a candidate from; None once every one is pruned."""
        if not self.path:  # no cohort: only its own queue's candidates
            return self.me if self.has(self.me) else None
        root = self.shape.ancestors(self.me)[-1]
        while root not in self.pruned:
            found = self._next(root)
            if found is not None:
                return found
        return None

    def _next(self, cohort: Key) -> Key | None:
        best_q: Key | None = None
        best_q_share = -1
        best_c: Key | None = None
        best_c_share = -1
        children = sorted(self.shape.children(cohort), key=lambda k: k[1])
        for child in (c for c in children if c[0] == "cq" and c not in self.pruned):
            share = self.shares.share(child)
            if (share == 0 and child != self.me) or not self.has(child):
                self.pruned.add(child)
            elif share >= best_q_share:
                best_q, best_q_share = child, share
        for child in (c for c in children if c[0] == "cohort" and c not in self.pruned):
            share = self.shares.share(child)
            if share == 0 and child not in self.path:
                self.pruned.add(child)
            elif share >= best_c_share:
                best_c, best_c_share = child, share
        if best_q is None and best_c is None:
            self.pruned.add(cohort)
            return None
        if best_c is not None and best_c_share >= best_q_share:
            return self._next(best_c)
        return best_q

    def almost_lca(self, key: Key, lca: Key) -> Key:
        below = key
        for node in self.shape.ancestors(key):
            if node == lca:
                return below
            below = node
        return below

    def sides(self, target: Key) -> tuple[Key, Key]:
        """The preemptor's and the target's nodes just below their lowest common cohort."""
        lca = next(n for n in self.shape.ancestors(target) if n in self.path)
        return self.almost_lca(self.me, lca), self.almost_lca(target, lca)


def fair_preemption(
    q: str,
    job: Job,
    flavor: str,
    flavors: Flavors,
    running: Mapping[str, Sequence[Job]],
    rec: object,
    fair: FairSharing,
    weights: Mapping[Key, float],
) -> Choice:
    """The jobs Kueue's fair sharing would preempt in ``flavor`` to admit ``job`` into
    ClusterQueue ``q`` (module docstring); no victims, with the rule, when none."""
    tree = flavors.tree(flavor)
    within = str(field_of(rec, "within_cluster_queue", "") or "Never")
    reclaim = str(field_of(rec, "reclaim_within_cohort", "") or "Never")
    me: Key = ("cq", q)
    found: list[tuple[str, Job]] = []
    if within != "Never":
        found += [(q, v) for v in running.get(q, ()) if allows(within, v, job)]
    parent = flavors.shape.parent(me)
    if parent is not None and reclaim != "Never":
        root = flavors.shape.ancestors(me)[-1]
        for other in sorted(flavors.shape.leaves(root)):
            key: Key = ("cq", other)
            if other == q or not tree.borrowing_with(key, 0.0):
                continue
            found += [(other, v) for v in running.get(other, ()) if allows(reclaim, v, job)]
    if not found:
        rule = "kueue.preemption_never" if reclaim == within == "Never" else "kueue.no_candidates"
        return Choice((), (), rule, f"fair sharing: no running job is one {_policies(rec)} "
                      "let it preempt; it waits until quota frees up")  # fmt: skip
    found.sort(key=lambda c: (c[0] == q, c[1].priority, -c[1].start_time, c[1].namespace, c[1].job))
    shares = Shares(flavors, weights)

    def fits() -> bool:
        tree.add_usage(q, -job.gpus)
        ok = job.gpus <= tree.available(q) + EPSILON
        tree.add_usage(q, job.gpus)
        return ok

    taken: list[tuple[str, Job]] = []

    def take(queue: str, v: Job) -> bool:
        tree.add_usage(queue, -v.gpus)
        taken.append((queue, v))
        return fits()

    tree.add_usage(q, job.gpus)
    first = _first(q, flavor, found, flavors, shares, fair.strategies[0], take)
    done = first is True
    if not isinstance(first, bool) and len(fair.strategies) > 1:
        done = _second(q, first, flavors, shares, take)
    tree.add_usage(q, -job.gpus)
    if not done:
        for queue, v in taken:
            tree.add_usage(queue, v.gpus)
        return Choice((), (), "kueue.preemption_insufficient", f"fair sharing "
                      f"({', '.join(fair.strategies)}): preempting every job its strategies allow "
                      f"would not make room for {job.gpus:g} GPUs; it waits")  # fmt: skip
    for queue, v in reversed(taken[:-1]):  # fill back, last first
        tree.add_usage(queue, v.gpus)
        if job.gpus <= tree.available(q) + EPSILON:
            taken.remove((queue, v))
        else:
            tree.add_usage(queue, -v.gpus)
    for queue, v in taken:
        tree.add_usage(queue, v.gpus)
    victims = tuple(v for _, v in taken)
    own = all(queue == q for queue, _ in taken)
    rule = "kueue.withinClusterQueue" if own else "kueue.fairSharing"
    return Choice(victims, tuple(taken), rule, f"fair sharing ({', '.join(fair.strategies)}): "
                  f"Kueue preempts {len(victims)} job(s) ({sum(v.gpus for v in victims):g} GPUs) "
                  "to admit it")  # fmt: skip


def _policies(rec: object) -> str:
    within = field_of(rec, "within_cluster_queue", "") or "Never"
    reclaim = field_of(rec, "reclaim_within_cohort", "") or "Never"
    return f"withinClusterQueue {within} and reclaimWithinCohort {reclaim}"


def _by_queue(found: Sequence[tuple[str, Job]]) -> dict[str, list[Job]]:
    out: dict[str, list[Job]] = {}
    for queue, v in found:
        out.setdefault(queue, []).append(v)
    return out


def _first(
    q: str,
    flavor: str,
    found: Sequence[tuple[str, Job]],
    flavors: Flavors,
    shares: Shares,
    strategy: str,
    take: Callable[[str, Job], bool],
) -> bool | list[tuple[str, Job]]:
    """``runFirstFsStrategy``: True once it fits, else the candidates passed over."""
    order = _Ordering(q, flavors, shares, _by_queue(found))
    retry: list[tuple[str, Job]] = []
    while (target := order.target()) is not None:
        queue = order.by_queue[target[1]]
        if target == order.me:
            if take(q, queue.pop(0)):
                return True
            continue
        mine, theirs = order.sides(target)
        new, old = shares.share(mine), shares.share(theirs)
        tree = flavors.tree(flavor)
        while queue:
            v = queue.pop(0)
            tree.add_usage(target[1], -v.gpus)
            after = shares.share(theirs)
            tree.add_usage(target[1], v.gpus)
            if (new <= after) if strategy == FINAL else (new < old):
                if take(target[1], v):
                    return True
                break
            retry.append((target[1], v))
    return retry


def _second(
    q: str,
    retry: list[tuple[str, Job]],
    flavors: Flavors,
    shares: Shares,
    take: Callable[[str, Job], bool],
) -> bool:
    """``runSecondFsStrategy`` (LessThanInitialShare): one candidate per queue."""
    order = _Ordering(q, flavors, shares, _by_queue(retry))
    while (target := order.target()) is not None:
        mine, theirs = order.sides(target)
        passes = shares.share(mine) < shares.share(theirs)
        if passes and take(target[1], order.by_queue[target[1]].pop(0)):
            return True
        order.pruned.add(target)
    return False
