"""Kueue's fair sharing in the reference (tests/kueue_reference.py), written from Kueue's
source and sharing no code with gpuscope: ``pkg/cache/fair_sharing.go``
(``dominantResourceShare``), ``pkg/scheduler/preemption/preemption.go``
(``findCandidates``, ``fairPreemptions``, ``runFirstFsStrategy``, ``runSecondFsStrategy``,
``fillBackWorkloads``), ``fairsharing/ordering.go``, ``least_common_ancestor.go``,
``target.go`` and ``strategy.go``. A mixin of ``KueueReference``: it uses that class's
tree arithmetic (``use``, ``sq``, ``avail``, ``up``, ``kids``, ``path``, ``held``...)."""

from __future__ import annotations

from typing import Any

MAX_SHARE = 2**63 - 1


class FairSharingReference:
    q: dict[str, Any]
    c: dict[str, Any]
    jobs: dict[str, list[Any]]
    cur: str
    fair: list[str] | None
    weights: dict[str, float]

    # -- fair sharing ------------------------------------------------------------------------
    def flavor_names(self) -> set[str]:
        out = {f for x in self.q.values() for f, *_ in x.quotas()}
        return out | {f for c in self.c.values() for f in (c.flavors or {"default-flavor": 0})}

    def drs(self, node: tuple[str, str]) -> int:
        parent = self.up(node)
        if parent is None:
            return 0
        milli = round(self.weights.get(node[1], 1.0) * 1000)
        if milli == 0:
            return MAX_SHARE
        here, borrowed, lendable = self.cur, 0.0, 0.0
        for f in self.flavor_names():
            self.cur = f
            borrowed += max(0, self.use(node) - self.sq(node))
            lendable += self.sq(parent)
        self.cur = here
        if borrowed <= 0:
            return 0
        per_mille = int(borrowed * 1000 // lendable) if lendable > 0 else -1
        return int(per_mille * 1000 / milli)  # Go: truncated towards zero

    def queues_under(self, node: tuple[str, str]) -> list[str]:
        if node[0] == "q":
            return [node[1]]
        return [n for k in self.kids(node) for n in self.queues_under(k)]

    def below_lca(self, a: tuple[str, str], b: tuple[str, str]) -> tuple[tuple[str, str], tuple[str, str]]:  # fmt: skip
        """The nodes of ``a``'s and ``b``'s paths just below their lowest common cohort."""
        chain_a = [a, *self.path(a)]
        chain_b = [b, *self.path(b)]
        lca = next(n for n in chain_b[1:] if n in chain_a[1:])
        return chain_a[chain_a.index(lca) - 1], chain_b[chain_b.index(lca) - 1]

    def fair_targets(self, j: Any) -> list[Any]:
        x, me = self.q[j.queue], ("q", j.queue)
        cands = [v for v in self.held(j.queue) if x.within != "Never"
                 and self.permitted(x.within, v, j)]  # fmt: skip
        path = self.path(me)
        if path and x.reclaim != "Never":
            for name in sorted(self.queues_under(path[-1])):
                if name != j.queue and self.over(("q", name)):
                    cands += [v for v in self.held(name) if self.permitted(x.reclaim, v, j)]
        if not cands:
            return []
        cands.sort(key=lambda v: (v.queue == j.queue, v.priority, -v.started, v.namespace,
                                  "Job/" + v.name))  # fmt: skip
        ghost = type(j)(j.queue, "", "(incoming)", j.gpus, j.priority, j.created, 10**9, self.cur)
        self.jobs[j.queue].append(ghost)
        removed: list[Any] = []

        def fits() -> bool:
            self.jobs[j.queue].remove(ghost)
            ok = j.gpus <= self.avail(me)
            self.jobs[j.queue].append(ghost)
            return ok

        def remove(v: Any) -> bool:
            self.jobs[v.queue].remove(v)
            removed.append(v)
            return fits()

        ok, retry = False, []
        walk = Walk(self, me, cands)
        while not ok and (t := walk.next()) is not None:
            if t == me:
                ok = remove(walk.pop(t))
                continue
            mine, theirs = self.below_lca(me, t)
            new, old = self.drs(mine), self.drs(theirs)
            while walk.left(t):
                v = walk.pop(t)
                self.jobs[v.queue].remove(v)
                after = self.drs(theirs)
                self.jobs[v.queue].append(v)
                passed = (
                    new <= after if self.fair[0] == "LessThanOrEqualToFinalShare" else new < old
                )
                if passed:
                    ok = remove(v)
                    break
                retry.append(v)
        if not ok and len(self.fair) > 1:
            walk = Walk(self, me, retry)
            while not ok and (t := walk.next()) is not None:
                mine, theirs = self.below_lca(me, t)
                if self.drs(mine) < self.drs(theirs):
                    ok = remove(walk.pop(t))
                walk.cut.add(t)
        self.jobs[j.queue].remove(ghost)
        if ok:  # give back, last first, what is not needed
            for v in list(reversed(removed[:-1])):
                self.jobs[v.queue].append(v)
                if j.gpus <= self.avail(me):
                    removed.remove(v)
                else:
                    self.jobs[v.queue].remove(v)
        for v in removed:
            self.jobs[v.queue].append(v)
        return removed if ok else []


class Walk:
    """fairsharing/ordering.go: which queue to take the next candidate from."""

    def __init__(self, ref: Any, me: tuple[str, str], cands: list[Any]) -> None:
        self.ref, self.me = ref, me
        self.by: dict[str, list[Any]] = {}
        for v in cands:
            self.by.setdefault(v.queue, []).append(v)
        self.on_path = set(ref.path(me))
        self.cut: set[tuple[str, str]] = set()

    def left(self, node: tuple[str, str]) -> bool:
        return bool(self.by.get(node[1]))

    def pop(self, node: tuple[str, str]) -> Any:
        return self.by[node[1]].pop(0)

    def next(self) -> tuple[str, str] | None:
        path = self.ref.path(self.me)
        if not path:
            return self.me if self.left(self.me) else None
        root = path[-1]
        while root not in self.cut:
            found = self.descend(root)
            if found is not None:
                return found
        return None

    def descend(self, cohort: tuple[str, str]) -> tuple[str, str] | None:
        kids = sorted(self.ref.kids(cohort), key=lambda k: k[1])
        top_q, top_q_drs, top_c, top_c_drs = None, -1, None, -1
        for k in kids:
            if k[0] != "q" or k in self.cut:
                continue
            d = self.ref.drs(k)
            if (d == 0 and k != self.me) or not self.left(k):
                self.cut.add(k)
            elif d >= top_q_drs:
                top_q, top_q_drs = k, d
        for k in kids:
            if k[0] != "c" or k in self.cut:
                continue
            d = self.ref.drs(k)
            if d == 0 and k not in self.on_path:
                self.cut.add(k)
            elif d >= top_c_drs:
                top_c, top_c_drs = k, d
        if top_q is None and top_c is None:
            self.cut.add(cohort)
            return None
        if top_c is not None and top_c_drs >= top_q_drs:
            return self.descend(top_c)
        return top_q
