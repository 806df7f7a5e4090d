"""The queue model against a reference written here from Kueue's documented rules, on
random Kueue setups: LocalQueues, two cohorts (and queues in none), nominal quotas with
borrowing and lending limits, and every preemption policy. The reference shares no code
with gpuscope: it reads the generated parameters, gpuscope reads the generated objects.

Kueue's rules, as its docs state them (Cluster Queue, Preemption pages; the ClusterQueue
API reference):

* quota: a queue may use ``nominalQuota + borrowingLimit``; it keeps
  ``nominalQuota - lendingLimit`` for itself, and the rest of every member's nominal quota
  is the cohort's shared pool; what members use beyond their kept part must fit the pool.
  A queue in no cohort has its nominal quota alone.
* classic preemption: a job that does not fit may preempt when it asks at most its
  queue's nominal quota, or ``borrowWithinCohort`` allows; candidates are its own
  queue's jobs as ``withinClusterQueue`` allows and borrowing queues' jobs as
  ``reclaimWithinCohort`` (or ``borrowWithinCohort``, under its threshold) allows; they
  are ordered other queues first, lower priority, most recently admitted; four heuristics
  pick greedy targets, which are then minimized walking back.
* gpuscope's documented convention: pending jobs in Kueue's pop order (priority, then
  creation), each admitted (or its victims evicted and it admitted) before the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscope.analytics.queueing.queues import judge
from gpuscope.collector.cluster.inventory_records import pod_from_json
from gpuscope.collector.cluster.queue_records import quotas_from_objects
from gpuscope.core.kube_objects import objects_from_documents
from tests.kueue_objects import cluster_queue, kubectl_list, local_queue, pod

RECLAIM = ["Never", "LowerPriority", "Any"]
WITHIN = ["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
INF = float("inf")


@dataclass
class Q:
    name: str
    nominal: int
    cohort: str | None
    borrowing: int | None
    lending: int | None
    reclaim: str
    within: str
    borrow: str
    threshold: int | None


@dataclass
class J:
    queue: str
    namespace: str
    name: str
    gpus: int
    priority: int
    minute: int


# -- the reference --------------------------------------------------------------------------
class Reference:
    """Kueue's documented quota and classic preemption, for one resource, flat cohorts."""

    def __init__(self, queues: list[Q], running: list[J]) -> None:
        self.q = {x.name: x for x in queues}
        self.used = {x.name: 0 for x in queues}
        self.admitted: dict[str, list[J]] = {x.name: [] for x in queues}
        for j in running:
            self.used[j.queue] += j.gpus
            self.admitted[j.queue].append(j)

    def kept(self, name: str) -> int:
        x = self.q[name]
        return 0 if x.lending is None else max(0, x.nominal - x.lending)

    def peers(self, name: str) -> list[str]:
        c = self.q[name].cohort
        return [n for n, x in self.q.items() if c is not None and x.cohort == c]

    def room(self, name: str, extra: int, *, borrow: bool = True) -> bool:
        """Would ``name`` stay within every limit using ``extra`` more GPUs?"""
        x, after = self.q[name], self.used[name] + extra
        if x.cohort is None:
            return after <= x.nominal
        if not borrow and after > x.nominal:
            return False
        if after > x.nominal + (INF if x.borrowing is None else x.borrowing):
            return False
        pool = sum(self.q[n].nominal - self.kept(n) for n in self.peers(name))
        beyond = sum(max(0, self.used[n] + (extra if n == name else 0) - self.kept(n))
                     for n in self.peers(name))  # fmt: skip
        return beyond <= pool

    def borrowing(self, name: str) -> bool:
        return self.used[name] > self.q[name].nominal

    def admit(self, j: J) -> tuple[str, list[tuple[str, str]]]:
        if self.room(j.queue, j.gpus):
            self.used[j.queue] += j.gpus
            return "placement", []
        victims = self.victims(j)
        if victims:
            for v in victims:
                self.admitted[v.queue].remove(v)
                self.used[v.queue] -= v.gpus
            self.used[j.queue] += j.gpus
        return "quota", sorted((v.namespace, v.name) for v in victims)

    def victims(self, j: J) -> list[J]:
        x = self.q[j.queue]
        if not (j.gpus <= x.nominal or x.borrow == "LowerPriority"):
            return []
        cands: list[J] = []
        for v in self.admitted[j.queue]:
            lower = v.priority < j.priority
            newer_equal = v.priority == j.priority and v.minute > j.minute
            if (x.within == "LowerPriority" and lower) or (
                x.within == "LowerOrNewerEqualPriority" and (lower or newer_equal)
            ):
                cands.append(v)

        def under_threshold(v: J) -> bool:
            return v.priority < j.priority and (x.threshold is None or v.priority <= x.threshold)

        for other in self.peers(j.queue):
            if other == j.queue or not self.borrowing(other):
                continue
            for v in self.admitted[other]:
                if (x.reclaim == "Any" or (x.reclaim == "LowerPriority" and v.priority < j.priority)
                        or (x.borrow == "LowerPriority" and under_threshold(v))):  # fmt: skip
                    cands.append(v)
        cands.sort(key=lambda v: (v.queue == j.queue, v.priority, -v.minute))
        if not cands:
            return []
        if all(v.queue == j.queue for v in cands):
            return self.greedy(j, cands, borrow=True)
        found: list[J] = []
        if x.borrow == "LowerPriority":
            found = self.greedy(j, [v for v in cands if under_threshold(v)], borrow=True)
        if not found and self.used[j.queue] < x.nominal:
            found = self.greedy(j, cands, borrow=False)
        if not found:
            found = self.greedy(j, [v for v in cands if v.queue == j.queue], borrow=True)
        return found

    def greedy(self, j: J, cands: list[J], *, borrow: bool) -> list[J]:
        saved = dict(self.used)
        chosen: list[J] = []
        ok = False
        for v in cands:
            if v.queue != j.queue and not self.borrowing(v.queue):
                continue
            self.used[v.queue] -= v.gpus
            chosen.append(v)
            if self.room(j.queue, j.gpus, borrow=borrow):
                ok = True
                break
        if ok:
            for v in list(reversed(chosen[:-1])):
                self.used[v.queue] += v.gpus
                if self.room(j.queue, j.gpus, borrow=borrow):
                    chosen.remove(v)
                else:
                    self.used[v.queue] -= v.gpus
        self.used = saved
        return chosen if ok else []


# -- random setups --------------------------------------------------------------------------
@st.composite
def setups(draw: Any) -> tuple[list[Q], list[J], list[J]]:
    queues: list[Q] = []
    for i in range(draw(st.integers(2, 5))):
        cohort = draw(st.sampled_from(["east", "west", "east", "west", "east", None]))
        nominal = draw(st.integers(0, 12))
        reclaim = draw(st.sampled_from(RECLAIM))
        borrow = (
            "Never" if reclaim == "Never" else draw(st.sampled_from(["Never", "LowerPriority"]))
        )
        queues.append(Q(
            f"cq-{i}", nominal, cohort,
            draw(st.one_of(st.none(), st.integers(0, 12))) if cohort else None,
            draw(st.one_of(st.none(), st.integers(0, nominal))) if cohort else None,
            reclaim, draw(st.sampled_from(WITHIN)), borrow,
            draw(st.one_of(st.none(), st.integers(0, 2))) if borrow != "Never" else None,
        ))  # fmt: skip
    minutes = iter(draw(st.permutations(list(range(60)))))
    # running jobs: admitted one by one where Kueue's quota lets them in (a reachable state)
    ref = Reference(queues, [])
    running: list[J] = []
    for k in range(draw(st.integers(2, 16))):
        q = draw(st.sampled_from(queues))
        ns = draw(st.sampled_from([f"{q.name}-a", f"{q.name}-b"]))
        j = J(q.name, ns, f"run-{k}", draw(st.integers(1, 8)), draw(st.integers(0, 2)),
              next(minutes))  # fmt: skip
        if ref.room(q.name, j.gpus):
            ref.used[q.name] += j.gpus
            running.append(j)
    pending = [
        J(q.name, f"{q.name}-a", f"wait-{k}", draw(st.integers(1, 8)), draw(st.integers(0, 3)),
          next(minutes))
        for k, q in enumerate(draw(st.lists(st.sampled_from(queues), min_size=1, max_size=4)))
    ]  # fmt: skip
    return queues, running, pending


def _objects(queues: list[Q]) -> list[dict[str, Any]]:
    out = []
    for q in queues:
        pre: dict[str, Any] = {"reclaimWithinCohort": q.reclaim, "withinClusterQueue": q.within}
        if q.borrow != "Never":
            pre["borrowWithinCohort"] = {"policy": q.borrow}
            if q.threshold is not None:
                pre["borrowWithinCohort"]["maxPriorityThreshold"] = q.threshold
        out.append(cluster_queue(q.name, q.nominal, q.cohort, preemption=pre,
                                 borrowing_limit=q.borrowing, lending_limit=q.lending))  # fmt: skip
        out += [local_queue(f"{q.name}-a", q.name), local_queue(f"{q.name}-b", q.name)]
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setups())
def test_gpuscope_agrees_with_kueues_documented_rules(
    setup: tuple[list[Q], list[J], list[J]],
) -> None:
    """Who waits on what (quota or placement) and who would be preempted, job by job."""
    queues, running, pending = setup
    docs = [("objects", kubectl_list(_objects(queues)))]
    quotas = quotas_from_objects(objects_from_documents(docs))
    pods = [pod_from_json(pod(j.namespace, j.name, j.gpus, "node-0", job=j.name,
                              minute=j.minute, priority=j.priority)) for j in running]  # fmt: skip
    pods += [pod_from_json(pod(j.namespace, j.name, j.gpus, None, job=j.name, minute=j.minute,
                               priority=j.priority)) for j in pending]  # fmt: skip
    got = {
        v.job: (v.waits_on, sorted((x.namespace, x.job.split("/", 1)[1]) for x in v.victims))
        for v in judge(pods, quotas).verdicts
    }
    ref = Reference(queues, running)
    want = {}
    for j in sorted(pending, key=lambda j: (-j.priority, j.minute)):
        want[f"Job/{j.name}"] = ref.admit(j)
    assert got == want


# -- cohort trees (Cohort objects) ----------------------------------------------------------
@dataclass
class C:
    name: str
    nominal: int
    parent: str | None
    borrowing: int | None
    lending: int | None


class TreeReference(Reference):
    """The same rules over a tree of Cohort objects (Kueue's Cohort page: a Cohort's own
    quota is shared by its subtree; its borrowing limit caps what the subtree takes from
    the parent, its lending limit what it gives). Stated as limits checked after the fact,
    not as a computed "available": a subtree's capacity is its own quota plus what each
    child lends (all of its capacity, or its lending limit); a subtree uses what its
    members use beyond what each keeps; a root never uses more than its capacity, a node
    with a borrowing limit never more than its capacity plus that limit."""

    def __init__(self, queues: list[Q], cohorts: list[C], running: list[J]) -> None:
        super().__init__(queues, running)
        self.c = {c.name: c for c in cohorts}

    def _parent(self, node: tuple[str, str]) -> tuple[str, str] | None:
        if node[0] == "cq":
            cohort = self.q[node[1]].cohort
            return ("co", cohort) if cohort else None
        c = self.c.get(node[1])
        return ("co", c.parent) if c is not None and c.parent else None

    def _children(self, node: tuple[str, str]) -> list[tuple[str, str]]:
        kids = [("cq", n) for n, x in self.q.items() if x.cohort == node[1]]
        return kids + [("co", n) for n, c in self.c.items() if c.parent == node[1]]

    def _limits(self, node: tuple[str, str]) -> tuple[int, int | None, int | None]:
        if node[0] == "cq":
            x = self.q[node[1]]
            return x.nominal, x.borrowing, x.lending
        c = self.c.get(node[1])
        return (0, None, None) if c is None else (c.nominal, c.borrowing, c.lending)

    def _capacity(self, node: tuple[str, str]) -> float:
        own = self._limits(node)[0]
        return own + (0 if node[0] == "cq" else sum(self._lends(k) for k in self._children(node)))

    def _lends(self, node: tuple[str, str]) -> float:
        cap, lending = self._capacity(node), self._limits(node)[2]
        return cap if lending is None else min(cap, lending)

    def _use(self, node: tuple[str, str], used: dict[str, int]) -> float:
        if node[0] == "cq":
            return used[node[1]]
        return sum(max(0.0, self._use(k, used) - (self._capacity(k) - self._lends(k)))
                   for k in self._children(node))  # fmt: skip

    def room(self, name: str, extra: int, *, borrow: bool = True) -> bool:
        after = dict(self.used)
        after[name] += extra
        if not borrow and after[name] > self.q[name].nominal:
            return False
        node: tuple[str, str] | None = ("cq", name)
        while node is not None:
            use, cap = self._use(node, after), self._capacity(node)
            parent, limit = self._parent(node), self._limits(node)[1]
            if parent is None and use > cap:
                return False
            if parent is not None and limit is not None and use > cap + limit:
                return False
            node = parent
        return True

    def _root(self, name: str) -> tuple[str, str] | None:
        node, root = self._parent(("cq", name)), None
        while node is not None:
            root, node = node, self._parent(node)
        return root

    def peers(self, name: str) -> list[str]:
        root = self._root(name)
        return [] if root is None else [n for n in self.q if self._root(n) == root]


@st.composite
def tree_setups(draw: Any) -> tuple[list[Q], list[C], list[J], list[J]]:
    queues, running, pending = draw(setups())
    cohorts = [C("org", draw(st.integers(0, 8)), None, None, None)]
    for name in ("east", "west"):
        if draw(st.booleans()):  # a Cohort object under org, with limits towards it
            cohorts.append(C(name, draw(st.integers(0, 4)), "org",
                             draw(st.one_of(st.none(), st.integers(0, 6))),
                             draw(st.one_of(st.none(), st.integers(0, 6)))))  # fmt: skip
    # keep only running jobs the tree admits, one by one (a reachable state)
    ref = TreeReference(queues, cohorts, [])
    admitted = []
    for j in sorted(running, key=lambda j: j.minute):
        if ref.room(j.queue, j.gpus):
            ref.used[j.queue] += j.gpus
            admitted.append(j)
    return queues, cohorts, admitted, pending


def _cohort_object(c: C) -> dict[str, Any]:
    gpu: dict[str, Any] = {"name": "nvidia.com/gpu", "nominalQuota": c.nominal}
    if c.borrowing is not None:
        gpu["borrowingLimit"] = c.borrowing
    if c.lending is not None:
        gpu["lendingLimit"] = c.lending
    spec: dict[str, Any] = {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                                                "flavors": [{"name": "default-flavor",
                                                             "resources": [gpu]}]}]}  # fmt: skip
    if c.parent:
        spec["parent"] = c.parent
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Cohort",
            "metadata": {"name": c.name}, "spec": spec}  # fmt: skip


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree_setups())
def test_gpuscope_agrees_with_kueue_on_cohort_trees(
    setup: tuple[list[Q], list[C], list[J], list[J]],
) -> None:
    """As above, with Cohort objects: east and west under org, each with its own quota and
    borrowing and lending limits towards org."""
    queues, cohorts, running, pending = setup
    objects = _objects(queues) + [_cohort_object(c) for c in cohorts]
    quotas = quotas_from_objects(objects_from_documents([("objects", kubectl_list(objects))]))
    pods = [pod_from_json(pod(j.namespace, j.name, j.gpus, "node-0", job=j.name,
                              minute=j.minute, priority=j.priority)) for j in running]  # fmt: skip
    pods += [pod_from_json(pod(j.namespace, j.name, j.gpus, None, job=j.name, minute=j.minute,
                               priority=j.priority)) for j in pending]  # fmt: skip
    got = {
        v.job: (v.waits_on, sorted((x.namespace, x.job.split("/", 1)[1]) for x in v.victims))
        for v in judge(pods, quotas).verdicts
    }
    ref = TreeReference(queues, cohorts, running)
    want = {
        f"Job/{j.name}": ref.admit(j)
        for j in sorted(pending, key=lambda j: (-j.priority, j.minute))
    }
    assert got == want
