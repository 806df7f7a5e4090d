"""A reference for Kueue's admission and classic preemption of GPU jobs, written in the
tests from Kueue's own source (kubernetes-sigs/kueue) and sharing no code with gpuscope:
it reads the generated parameters, gpuscope reads the generated objects.

What it follows, file by file:

* ``pkg/cache/resource_node.go``: a node's SubtreeQuota is its own nominal quota plus,
  for each child, the child's SubtreeQuota less what the child keeps (its guaranteed
  quota: SubtreeQuota - lendingLimit, where a lendingLimit is set); a cohort's Usage is
  what each child uses beyond what it keeps; ``available`` walks up to the root, capping
  what comes from the parent by the borrowingLimit; ``potentialAvailable`` likewise
  with no usage.
* ``pkg/scheduler/flavorassigner/flavorassigner.go`` (``fitsResourceQuota``): beyond the
  potential capacity: no fit; within Available: fit; else preemption is tried only if
  the request is within the nominal quota, or fits some non-root cohort on the path
  (``FindHeightOfLowestSubtreeThatFits``), or ``borrowWithinCohort`` is set. A resource
  no resource group covers has no flavor: never admitted.
* ``pkg/scheduler/scheduler.go``: a workload whose namespace the ClusterQueue's
  ``namespaceSelector`` does not select is inadmissible (an unset selector selects none).
* ``pkg/scheduler/preemption/classical/{hierarchical_preemption,candidate_generator}.go``
  and ``preemption.go`` (``classicalPreemptions``): candidate variants, the walk up the
  cohort tree, the validity of a candidate against its path to the lowest common
  ancestor, the one or two runs (with and without borrowing), greedy removal and the
  fill-back walk; ``CandidatesOrdering``: lower priority, then most recently admitted.
* pop order: priority, then creation time (queue-order timestamp), each head admitted
  (or its victims evicted and it admitted) before the next.
* ``pkg/scheduler/flavorassigner/flavorassigner.go`` (``findFlavorForPodSetResource``,
  ``flavorSelector``, ``shouldTryNextFlavor``, ``isPreferred``) and
  ``pkg/scheduler/preemption/preemption_oracle.go``: quota and usage are per flavor; the
  queue's flavors are tried in order, skipping a flavor whose nodeLabels the job's node
  selector (on the keys the queue's flavors use) rejects; each gets a mode (no fit, no
  candidates, preempt: a victim in its own queue, reclaim: victims elsewhere only, fit)
  and whether it borrows; the search stops per flavorFungibility, else the best mode
  wins (then not borrowing, then the first).
* fair sharing (``fairSharing.enable``), from ``pkg/cache/fair_sharing.go``
  (``dominantResourceShare``: borrowed over the parent's subtree quota, per mille, per
  weight in milli-units; weight 0: the largest; no parent: 0),
  ``pkg/scheduler/preemption/preemption.go`` (``findCandidates``, ``fairPreemptions``,
  ``runFirstFsStrategy``, ``runSecondFsStrategy``, ``fillBackWorkloads``),
  ``fairsharing/ordering.go`` (the walk from the root to the child of highest share,
  pruning), ``fairsharing/least_common_ancestor.go`` and ``target.go`` (shares of the two
  nodes below the lowest common cohort) and ``fairsharing/strategy.go`` (S2-a, S2-b);
  with fair sharing a queue that may reclaim also tries preemption while borrowing
  (``flavorassigner.go`` ``canPreemptWhileBorrowing``). Ties between siblings of equal
  share (Kueue's map order) go to the last by name. That part is in
  tests/kueue_fair_reference.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.kueue_fair_reference import FairSharingReference

INF = float("inf")


@dataclass
class RQueue:
    name: str
    nominal: int
    cohort: str | None
    borrowing: int | None = None
    lending: int | None = None
    reclaim: str = "Never"
    within: str = "Never"
    borrow: str = "Never"
    threshold: int | None = None
    covers_gpu: bool = True
    #: Namespaces it admits from (None: all).
    admits: frozenset[str] | None = None
    #: Its GPU flavors in order, each (name, nominal, borrowingLimit, lendingLimit); None:
    #: one flavor, ``default-flavor``, with the figures above.
    flavors: list[tuple[str, int, int | None, int | None]] | None = None
    #: flavorFungibility (whenCanBorrow, whenCanPreempt).
    fungibility: tuple[str, str] = ("Borrow", "TryNextFlavor")

    def quotas(self) -> list[tuple[str, int, int | None, int | None]]:
        if self.flavors is not None:
            return self.flavors
        return [("default-flavor", self.nominal, self.borrowing, self.lending)]


@dataclass
class RCohort:
    name: str
    nominal: int
    parent: str | None
    borrowing: int | None = None
    lending: int | None = None
    #: Per flavor (nominal, borrowingLimit, lendingLimit); None: ``default-flavor`` only.
    flavors: dict[str, tuple[int, int | None, int | None]] | None = None

    def quota(self, flavor: str) -> tuple[int, int | None, int | None]:
        if self.flavors is None:
            return (self.nominal, self.borrowing, self.lending) if flavor == "default-flavor" \
                else (0, None, None)  # fmt: skip
        return self.flavors.get(flavor, (0, None, None))


@dataclass
class RJob:
    queue: str
    namespace: str
    name: str
    gpus: int
    priority: int
    created: int
    started: int = 0
    #: The flavor it runs in (set when admitted).
    flavor: str = "default-flavor"
    #: Its pods' nodeSelector.
    selector: dict[str, str] = field(default_factory=dict)
    #: Its pods tolerate the tainted flavors' taint.
    tolerates: bool = False


@dataclass
class Outcome:
    kind: str  # fits | never_fits | namespace | no_gpu | no_flavor | preempt | wait
    victims: list[tuple[str, str]] = field(default_factory=list)
    #: The flavor it is admitted to (fits, preempt).
    flavor: str = ""


class KueueReference(FairSharingReference):
    def __init__(self, queues: list[RQueue], cohorts: list[RCohort], running: list[RJob],
                 labels: dict[str, dict[str, str]] | None = None,
                 fair: list[str] | None = None,
                 weights: dict[str, float] | None = None,
                 tainted: frozenset[str] = frozenset()) -> None:  # fmt: skip
        """``labels``: each ResourceFlavor's nodeLabels (a flavor not there has none);
        ``fair``: the fair sharing strategies (None: classic preemption); ``weights``: the
        fairSharing weight of queues and cohorts by name (default 1)."""
        self.labels = labels or {}
        self.tainted = tainted
        self.fair = fair
        self.weights = weights or {}
        self.cur = "default-flavor"  # the flavor the arithmetic below is about
        self.q = {x.name: x for x in queues}
        self.c = {x.name: x for x in cohorts}
        # a cohort named by a queue or a Cohort but with no object: no quota, a root
        for name in [x.cohort for x in queues] + [c.parent for c in cohorts]:
            if name and name not in self.c:
                self.c[name] = RCohort(name, 0, None)
        self.jobs: dict[str, list[RJob]] = {x.name: [] for x in queues}
        for j in running:
            self.jobs[j.queue].append(j)

    # -- the tree ----------------------------------------------------------------------------
    def up(self, node: tuple[str, str]) -> tuple[str, str] | None:
        parent = self.q[node[1]].cohort if node[0] == "q" else self.c[node[1]].parent
        return ("c", parent) if parent else None

    def kids(self, node: tuple[str, str]) -> list[tuple[str, str]]:
        return [("c", n) for n, c in self.c.items() if c.parent == node[1]] + [
            ("q", n) for n, x in self.q.items() if x.cohort == node[1]
        ]

    def spec(self, node: tuple[str, str]) -> tuple[int, int | None, int | None]:
        if node[0] == "c":
            return self.c[node[1]].quota(self.cur)
        x = self.q[node[1]]
        if not x.covers_gpu:
            return 0, None, None
        return next(((n, b, le) for f, n, b, le in x.quotas() if f == self.cur), (0, None, None))

    def held(self, queue: str) -> list[RJob]:
        """The queue's running jobs in the current flavor."""
        return [j for j in self.jobs[queue] if j.flavor == self.cur]

    def sq(self, node: tuple[str, str]) -> float:
        """SubtreeQuota."""
        own = self.spec(node)[0]
        if node[0] == "q":
            return own
        return own + sum(self.sq(k) - self.kept(k) for k in self.kids(node))

    def kept(self, node: tuple[str, str]) -> float:
        lending = self.spec(node)[2]
        return 0 if lending is None else max(0, self.sq(node) - lending)

    def use(self, node: tuple[str, str]) -> float:
        if node[0] == "q":
            return sum(j.gpus for j in self.held(node[1]))
        return sum(max(0, self.use(k) - self.kept(k)) for k in self.kids(node))

    def local(self, node: tuple[str, str]) -> float:
        return max(0, self.kept(node) - self.use(node))

    def avail(self, node: tuple[str, str]) -> float:
        parent = self.up(node)
        if parent is None:
            return self.sq(node) - self.use(node)
        from_parent = self.avail(parent)
        limit = self.spec(node)[1]
        if limit is not None:
            stored = self.sq(node) - self.kept(node)
            used_there = max(0, self.use(node) - self.kept(node))
            from_parent = min(stored - used_there + limit, from_parent)
        return self.local(node) + from_parent

    def potential(self, node: tuple[str, str]) -> float:
        parent = self.up(node)
        if parent is None:
            return self.sq(node)
        out = self.kept(node) + self.potential(parent)
        limit = self.spec(node)[1]
        return out if limit is None else min(self.sq(node) + limit, out)

    def over(self, node: tuple[str, str], extra: float = 0) -> bool:
        """BorrowingWith / not IsWithinNominal."""
        return self.use(node) + extra > self.sq(node)

    def path(self, node: tuple[str, str]) -> list[tuple[str, str]]:
        out, cur = [], self.up(node)
        while cur is not None:
            out.append(cur)
            cur = self.up(cur)
        return out

    # -- admission ---------------------------------------------------------------------------
    def suits(self, x: RQueue, flavor: str, j: RJob) -> bool:
        """Its pods tolerate the flavor's taint (NoSchedule), and flavorSelector: the job's
        nodeSelector on the keys its queue's flavors label."""
        if flavor in self.tainted and not j.tolerates:
            return False
        keys = {k for f, *_ in x.quotas() for k in self.labels.get(f, {})}
        mine = self.labels.get(flavor, {})
        return all(mine.get(k) == v for k, v in j.selector.items() if k in keys)

    def admit(self, j: RJob) -> Outcome:
        x, me = self.q[j.queue], ("q", j.queue)
        if x.admits is not None and j.namespace not in x.admits:
            return Outcome("namespace")
        if not x.covers_gpu:
            return Outcome("no_gpu")
        options = [f for f, *_ in x.quotas() if self.suits(x, f, j)]
        if not options:
            return Outcome("no_flavor")
        stop_borrow = x.fungibility[0] in ("Borrow", "MayStopSearch")
        stop_preempt = x.fungibility[1] in ("Preempt", "MayStopSearch")
        best: tuple[int, bool, str, list[RJob]] | None = None
        beyond = 0
        for f in options:
            self.cur = f
            mode, borrows, victims = self.attempt(j, me, x)
            beyond += mode == -1
            mode = max(mode, 0)
            stop = (mode == 4 and (not borrows or stop_borrow)) or (
                mode in (2, 3) and stop_preempt and (not borrows or stop_borrow)
            )
            better = mode > 0 and (best is None or mode > best[0] or (
                mode == best[0] and not borrows and best[1]))  # fmt: skip
            if stop or better:
                best = (mode, borrows, f, victims)
            if stop:
                break
        if best is None:
            return Outcome("never_fits" if beyond == len(options) else "wait")
        mode, _, f, victims = best
        self.cur = f
        if mode == 1:
            return Outcome("wait")
        for v in victims:
            self.jobs[v.queue].remove(v)
        self.jobs[j.queue].append(self.now(j, f))
        if mode == 4:
            return Outcome("fits", flavor=f)
        return Outcome("preempt", sorted((v.namespace, v.name) for v in victims), f)

    def attempt(self, j: RJob, me: tuple[str, str], x: RQueue) -> tuple[int, bool, list[RJob]]:
        """Mode in the current flavor: -1 beyond its potential, 0 no fit, 1 no candidates,
        2 preempt (own queue), 3 reclaim, 4 fit; whether it borrows; the victims."""
        if j.gpus > self.potential(me):
            return -1, True, []
        if j.gpus <= max(0, self.avail(me)):
            return 4, self.over(me, j.gpus), []
        if not (j.gpus <= self.spec(me)[0] or self.lower_subtree_fits(me, j.gpus)
                or x.borrow == "LowerPriority"
                or (self.fair is not None and x.reclaim != "Never")):  # fmt: skip
            return 0, True, []
        victims = self.targets(j) if self.fair is None else self.fair_targets(j)
        if not victims:
            return 1, self.over(me, j.gpus), []
        for v in victims:
            self.jobs[v.queue].remove(v)
        borrows = self.over(me, j.gpus)
        for v in victims:
            self.jobs[v.queue].append(v)
        return (2 if any(v.queue == j.queue for v in victims) else 3), borrows, victims

    @staticmethod
    def now(j: RJob, flavor: str) -> RJob:
        """Admitted now: the most recently admitted of all (CandidatesOrdering)."""
        return RJob(j.queue, j.namespace, j.name, j.gpus, j.priority, j.created, 10**9, flavor,
                    j.selector, j.tolerates)  # fmt: skip

    def lower_subtree_fits(self, me: tuple[str, str], gpus: float) -> bool:
        if self.up(me) is None:
            return False
        if not self.over(me, gpus):
            return True
        rest = gpus - self.local(me)
        for node in self.path(me):
            if not self.over(node, rest):
                return self.up(node) is not None
            rest -= self.local(node)
        return False

    # -- classic preemption ------------------------------------------------------------------
    def permitted(self, policy: str, v: RJob, j: RJob) -> bool:
        if policy == "Any":
            return True
        if policy == "LowerPriority":
            return v.priority < j.priority
        if policy == "LowerOrNewerEqualPriority":
            return v.priority < j.priority or (v.priority == j.priority and j.created < v.created)
        return False

    def targets(self, j: RJob) -> list[RJob]:
        x, me = self.q[j.queue], ("q", j.queue)
        own = [] if x.within == "Never" else [
            (v, "own", None) for v in self.held(j.queue) if self.permitted(x.within, v, j)
        ]  # fmt: skip
        ahead: list[tuple[RJob, str, tuple[str, str] | None]] = []
        behind: list[tuple[RJob, str, tuple[str, str] | None]] = []

        def kind(v: RJob, edge: bool) -> str:
            if edge:
                return "edge"
            if x.borrow != "LowerPriority" or v.priority >= j.priority:
                return "no_borrow"
            if x.threshold is not None and v.priority > x.threshold:
                return "no_borrow"
            return "borrow_ok"

        def gather(node: tuple[str, str], top: tuple[str, str], skip: tuple[str, str] | None,
                   edge: bool, into: list[tuple[RJob, str, tuple[str, str] | None]]) -> None:  # fmt: skip
            for k in self.kids(node):
                if k[0] == "c" and k != skip and self.over(k):
                    gather(k, top, skip, edge, into)
            for k in self.kids(node):
                if k[0] == "q" and k != me and self.over(k):
                    into += [(v, kind(v, edge), top) for v in self.held(k[1])
                             if self.permitted(x.reclaim, v, j)]  # fmt: skip

        if self.up(me) is not None and x.reclaim != "Never":
            edge = self.use(me) + j.gpus <= self.sq(me)
            rest = max(0, j.gpus - self.local(me))
            prev = None
            for node in self.path(me):
                gather(node, node, prev, edge, ahead if edge else behind)
                fit_here = self.use(node) + rest <= self.sq(node)
                rest = max(0, rest - self.local(node))
                edge = edge or fit_here
                prev = node

        def order(c: tuple[RJob, str, tuple[str, str] | None]) -> tuple[int, int, str, str]:
            return (c[0].priority, -c[0].started, c[0].namespace, "Job/" + c[0].name)

        cands = sorted(ahead, key=order) + sorted(behind, key=order) + sorted(own, key=order)
        no_borrow_policy = x.borrow != "LowerPriority"
        below_nominal = self.use(me) < self.spec(me)[0]
        if (not ahead and not behind) or (no_borrow_policy and not below_nominal):
            runs = [True]
        elif no_borrow_policy and not ahead:
            runs = [False, True]
        else:
            runs = [True, False]
        for borrowing in runs:
            picked = self.greedy(j, cands, borrowing)
            if picked:
                return picked
        return []

    def usable(self, c: tuple[RJob, str, tuple[str, str] | None], j: RJob, borrowing: bool) -> bool:
        v, kind, top = c
        if v.queue == j.queue:
            return True
        if borrowing and kind == "no_borrow":
            return False
        node: tuple[str, str] | None = ("q", v.queue)
        while node is not None and node != top:
            if not self.over(node):
                return False
            node = self.up(node)
        return True

    def room(self, j: RJob, borrowing: bool) -> bool:
        me = ("q", j.queue)
        if not borrowing and self.over(me, j.gpus):
            return False
        return j.gpus <= max(0, self.avail(me))

    def greedy(self, j: RJob, cands: list[tuple[RJob, str, tuple[str, str] | None]],
               borrowing: bool) -> list[RJob]:  # fmt: skip
        removed: list[RJob] = []
        ok = False
        for c in cands:
            if not self.usable(c, j, borrowing):
                continue
            self.jobs[c[0].queue].remove(c[0])
            removed.append(c[0])
            if self.room(j, borrowing):
                ok = True
                break
        if ok:
            for v in list(reversed(removed[:-1])):
                self.jobs[v.queue].append(v)
                if self.room(j, borrowing):
                    removed.remove(v)
                else:
                    self.jobs[v.queue].remove(v)
        for v in removed:
            self.jobs[v.queue].append(v)
        return removed if ok else []
