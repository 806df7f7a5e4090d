"""Kueue's quota arithmetic over a cohort tree, for GPUs.

ClusterQueues are leaves; cohorts (named by ``spec.cohort``/``cohortName``, with or without
a Cohort object) are inner nodes, and a Cohort object's ``parent`` links cohorts into a
tree. Kueue's rules as its source has them (``pkg/cache/resource_node.go``: SubtreeQuota,
guaranteedQuota, ``available``, ``potentialAvailable``; docs/analytics.md, "Queues"):

* a node's *subtree quota* is its own nominal quota plus what each child lends it: the
  child's subtree quota less the part it keeps for itself;
* a node with a ``lendingLimit`` keeps ``subtree - lendingLimit`` for itself (its
  *guaranteed* part), which no one else may use; without one it keeps nothing back;
* usage bubbles up: a cohort's usage is what its children use beyond their guaranteed part;
* what a node may still use is its unused guaranteed part plus what its parent still has,
  the latter capped by its ``borrowingLimit`` (counted over its lent part); a root has its
  subtree quota less its usage;
* a ClusterQueue *borrows* when its usage exceeds its nominal quota.

Only GPUs (``nvidia.com/gpu``), the flavors of one queue added up: without Workload
objects gpuscope cannot tell which flavor a pod was admitted to.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, str]  # ("cq" | "cohort", name)


def _get(rec: Any, key: str) -> Any:
    return rec.get(key) if isinstance(rec, dict) else getattr(rec, key, None)


@dataclass(slots=True)
class _Node:
    nominal: float = 0.0
    borrowing_limit: float | None = None
    lending_limit: float | None = None
    parent: Key | None = None
    children: list[Key] = field(default_factory=list)
    usage: float = 0.0  # ClusterQueues only; a cohort's is derived


class CohortTree:
    """ClusterQueues and cohorts with their GPU usage; mutable (usage only)."""

    def __init__(self, cluster_queues: Iterable[Any], cohorts: Iterable[Any] = ()) -> None:
        self.nodes: dict[Key, _Node] = {}
        parents: dict[Key, str] = {}
        for c in cohorts:
            key = self._cohort(str(_get(c, "project")), c)
            if _get(c, "cohort"):
                parents[key] = str(_get(c, "cohort"))
        for q in cluster_queues:
            key = ("cq", str(_get(q, "project")))
            self._node(key, q)
            if _get(q, "cohort"):
                self._link(key, self._cohort(str(_get(q, "cohort")), None))
        for key, parent_name in parents.items():
            parent = self._cohort(parent_name, None)
            if not self._is_ancestor(key, parent):  # Kueue disables a cycle; we cut it
                self._link(key, parent)

    def _node(self, key: Key, rec: Any) -> _Node:
        node = self.nodes.setdefault(key, _Node())
        if rec is not None:
            node.nominal = float(_get(rec, "guaranteed_gpus") or 0.0)
            bl, ll = _get(rec, "borrowing_limit"), _get(rec, "lending_limit")
            node.borrowing_limit = None if bl is None else float(bl)
            node.lending_limit = None if ll is None else float(ll)
        return node

    def _cohort(self, name: str, rec: Any) -> Key:
        key = ("cohort", name)
        self._node(key, rec)
        return key

    def _link(self, child: Key, parent: Key) -> None:
        self.nodes[child].parent = parent
        self.nodes[parent].children.append(child)

    def _is_ancestor(self, key: Key, of: Key) -> bool:
        cur: Key | None = of
        while cur is not None:
            if cur == key:
                return True
            cur = self.nodes[cur].parent
        return False

    # -- the arithmetic --------------------------------------------------------------------
    def subtree(self, key: Key) -> float:
        node = self.nodes[key]
        return node.nominal + sum(self.subtree(c) - self.guaranteed(c) for c in node.children)

    def guaranteed(self, key: Key) -> float:
        ll = self.nodes[key].lending_limit
        return 0.0 if ll is None else max(0.0, self.subtree(key) - ll)

    def usage(self, key: Key) -> float:
        node = self.nodes[key]
        if key[0] == "cq":
            return node.usage
        return sum(max(0.0, self.usage(c) - self.guaranteed(c)) for c in node.children)

    def _available(self, key: Key) -> float:
        node = self.nodes[key]
        if node.parent is None:
            return self.subtree(key) - self.usage(key)
        guaranteed, usage = self.guaranteed(key), self.usage(key)
        parent = self._available(node.parent)
        if node.borrowing_limit is not None:
            lent = self.subtree(key) - guaranteed
            parent = min(lent - max(0.0, usage - guaranteed) + node.borrowing_limit, parent)
        return max(0.0, guaranteed - usage) + parent

    def _potential(self, key: Key) -> float:
        node = self.nodes[key]
        if node.parent is None:
            return self.subtree(key)
        out = self.guaranteed(key) + self._potential(node.parent)
        if node.borrowing_limit is not None:
            out = min(self.subtree(key) + node.borrowing_limit, out)
        return out

    # -- nodes, as Kueue's hierarchical preemption walks them ----------------------------------
    def local_available(self, key: Key) -> float:
        """The node's guaranteed part it does not use (invisible to its parent)."""
        return max(0.0, self.guaranteed(key) - self.usage(key))

    def within_nominal(self, key: Key) -> bool:
        """Uses no more than its subtree quota (a ClusterQueue: its nominal quota)."""
        return self.usage(key) <= self.subtree(key) + 1e-9

    def borrowing_with(self, key: Key, gpus: float) -> bool:
        return self.usage(key) + gpus > self.subtree(key) + 1e-9

    def parent(self, key: Key) -> Key | None:
        return self.nodes[key].parent

    def ancestors(self, key: Key) -> list[Key]:
        """From the node's parent up to its root."""
        out: list[Key] = []
        cur = self.nodes[key].parent
        while cur is not None:
            out.append(cur)
            cur = self.nodes[cur].parent
        return out

    def children(self, key: Key) -> list[Key]:
        return list(self.nodes[key].children)

    def leaves(self, key: Key) -> list[str]:
        """The ClusterQueues in ``key``'s subtree."""
        if key[0] == "cq":
            return [key[1]]
        return [q for child in self.nodes[key].children for q in self.leaves(child)]

    def reclaim_in_hierarchy(self, cq: str, gpus: float) -> bool:
        """Kueue's ``FindHeightOfLowestSubtreeThatFits``: does ``gpus`` more fit within
        the quota of some cohort below the root on ``cq``'s path (or within ``cq``'s own
        nominal quota, for a queue with a parent)? Then it may preempt for it even beyond
        its nominal quota."""
        key: Key = ("cq", cq)
        has_parent = self.nodes[key].parent is not None
        if not (has_parent and self.borrowing_with(key, gpus)):
            return has_parent
        remaining = gpus - self.local_available(key)
        for node in self.ancestors(key):
            if not self.borrowing_with(node, remaining):
                return self.nodes[node].parent is not None
            remaining -= self.local_available(node)
        return False

    # -- ClusterQueues ---------------------------------------------------------------------
    def available(self, cq: str) -> float:
        """GPUs ClusterQueue ``cq`` may still be admitted now (may be negative when over)."""
        return self._available(("cq", cq))

    def potential_available(self, cq: str) -> float:
        """The most GPUs ``cq`` could ever use with nothing else running."""
        return self._potential(("cq", cq)) if ("cq", cq) in self.nodes else 0.0

    def nominal(self, cq: str) -> float:
        return self.nodes[("cq", cq)].nominal

    def cq_usage(self, cq: str) -> float:
        return self.nodes[("cq", cq)].usage

    def add_usage(self, cq: str, gpus: float) -> None:
        self.nodes.setdefault(("cq", cq), _Node()).usage += gpus

    def borrowing(self, cq: str) -> bool:
        node = self.nodes[("cq", cq)]
        return node.usage > node.nominal + 1e-9

    def root(self, cq: str) -> Key | None:
        """The root of ``cq``'s cohort tree; None for a ClusterQueue in no cohort."""
        cur = self.nodes[("cq", cq)].parent
        while cur is not None and self.nodes[cur].parent is not None:
            cur = self.nodes[cur].parent
        return cur

    def cohort_figures(self, cq: str) -> tuple[str, float, float]:
        """(root cohort, its subtree quota, its usage) for reasons; ("", nominal, usage)
        for a ClusterQueue in no cohort."""
        root = self.root(cq)
        if root is None:
            return "", self.nominal(cq), self.cq_usage(cq)
        return root[1], self.subtree(root), self.usage(root)
