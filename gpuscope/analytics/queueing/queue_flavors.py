"""Kueue's GPU flavors: which ResourceFlavor a pod is of, and one quota tree per flavor.

Kueue keeps quota, usage and borrowing per flavor and resource (``pkg/cache``'s
FlavorResource), so each GPU flavor has its own cohort tree
(:class:`~gpuscope.analytics.queueing.queue_tree.CohortTree`), built from the
``flavor_quotas`` of the ClusterQueues and Cohorts (a queue that does not list a flavor has
no quota in it). Records from before flavors were kept apart carry none: they make one
unnamed flavor with the sums, as before.

Which flavor a pod is of (docs/analytics.md, "Queues", "Flavors"):

* a pending pod may go to a flavor whose ``nodeLabels`` its ``nodeSelector`` and required
  node affinity accept, counting only the label keys some flavor of the queue's resource
  group names (Kueue's ``flavorSelector``: a term left with no requirement accepts every
  flavor), and whose hard ``nodeTaints`` it (or the flavor) tolerates
  (``pkg/scheduler/flavorassigner/flavorassigner.go`` ``findFlavorForPodSetResource``);
* a running pod is of the queue's flavor whose ``nodeLabels`` its node carries, the one
  naming the most labels where several do (a flavor without labels matches every node),
  the queue's first flavor where none does or the node is unknown: without Workload
  objects this is how gpuscope tells the flavor a pod was admitted to.

A flavor no ResourceFlavor object describes counts as one without labels or taints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuscope.analytics.queueing.queue_charge import field_of
from gpuscope.analytics.queueing.queue_tree import CohortTree
from gpuscope.collector.cluster.node_selection import matches
from gpuscope.collector.cluster.scheduling_rules import tolerates


@dataclass(frozen=True, slots=True)
class Flavor:
    name: str
    labels: Mapping[str, str]
    taints: tuple[str, ...] = ()
    tolerations: tuple[str, ...] = ()


def _flavor(rec: Any) -> Flavor:
    labels = dict(
        str(text).split("=", 1) for text in field_of(rec, "node_labels", ()) if "=" in str(text)
    )
    return Flavor(
        str(field_of(rec, "project", "")),
        labels,
        tuple(field_of(rec, "node_taints", ())),
        tuple(field_of(rec, "tolerations", ())),
    )


def flavor_quotas(rec: Any) -> list[tuple[str, float, float | None, float | None]]:
    """A ClusterQueue's or Cohort's GPU quota per flavor, in order; one unnamed flavor with
    the summed figures for a record from before flavors were kept apart."""
    rows = field_of(rec, "flavor_quotas", None)
    if not rows:
        if not field_of(rec, "gpu_covered", True):
            return []
        bl, ll = field_of(rec, "borrowing_limit"), field_of(rec, "lending_limit")
        return [("", float(field_of(rec, "guaranteed_gpus", 0.0)), bl, ll)]
    return [
        (str(f), float(n), None if b is None else float(b), None if ll is None else float(ll))
        for f, n, b, ll in rows
    ]


class Flavors:
    """The ResourceFlavors known and a cohort tree per GPU flavor."""

    def __init__(
        self, cluster_queues: Mapping[str, Any], cohorts: Iterable[Any], flavors: Iterable[Any]
    ) -> None:
        self.known = {f.name: f for f in map(_flavor, flavors)}
        self.cqs = dict(cluster_queues)
        cohorts = list(cohorts)
        self.order = {q: [f for f, *_ in flavor_quotas(rec)] for q, rec in self.cqs.items()}
        names = {f for fs in self.order.values() for f in fs}
        names |= {f for c in cohorts for f, *_ in flavor_quotas(c)}
        self.shape = CohortTree(self.cqs.values(), cohorts)
        self.trees = {
            f: CohortTree(
                [_in_flavor(rec, f) for rec in self.cqs.values()],
                [_in_flavor(c, f) for c in cohorts],
            )
            for f in sorted(names)
        }

    def root(self, cq: str) -> str:
        """The root cohort of ``cq``'s tree ("" for none)."""
        root = self.shape.root(cq) if ("cq", cq) in self.shape.nodes else None
        return root[1] if root else ""

    def of(self, name: str) -> Flavor:
        return self.known.get(name) or Flavor(name, {})

    def queue_flavors(self, cq: str) -> list[str]:
        return self.order.get(cq, [])

    def tree(self, flavor: str) -> CohortTree:
        return self.trees[flavor]

    def of_node(self, cq: str, labels: Mapping[str, str] | None) -> str:
        """The flavor a running pod of ``cq`` on a node with ``labels`` is charged to."""
        order = self.queue_flavors(cq)
        if not order:
            return ""
        if labels is None:
            return order[0]
        fitting = [
            (len(self.of(f).labels), -i, f)
            for i, f in enumerate(order)
            if all(labels.get(k) == v for k, v in self.of(f).labels.items())
        ]
        return max(fitting)[2] if fitting else order[0]

    def refusal(self, cq: str, flavor: str, pod: Any) -> str | None:
        """Why a pending pod of ``cq`` may not go to ``flavor`` (None: it may)."""
        f = self.of(flavor)
        tolerations = (*tuple(field_of(pod, "tolerations", ()) or ()), *f.tolerations)
        for taint in f.taints:
            if not tolerates(tolerations, taint):
                return f"untolerated taint {taint} in flavor {flavor}"
        keys = {k for name in self.queue_flavors(cq) for k in self.of(name).labels}
        terms = [_restricted(t, keys) for t in field_of(pod, "node_selector_terms", ()) or ()]
        if not terms or any(not t for t in terms) or matches(terms, f.labels):
            return None
        return f"flavor {flavor} doesn't match node affinity"


def _restricted(term: str, keys: set[str]) -> str:
    """A term with only the requirements on ``keys`` (matchFields dropped)."""
    return ";".join(r for r in str(term).split(";") if r and r.split("|", 1)[0] in keys)


def _in_flavor(rec: Any, flavor: str) -> dict[str, Any]:
    """A queue or cohort record as its quota in one flavor (none where it has none)."""
    row = next((r for r in flavor_quotas(rec) if r[0] == flavor), (flavor, 0.0, None, None))
    return {
        "project": field_of(rec, "project", ""),
        "cohort": field_of(rec, "cohort", ""),
        "guaranteed_gpus": row[1],
        "borrowing_limit": row[2],
        "lending_limit": row[3],
    }
