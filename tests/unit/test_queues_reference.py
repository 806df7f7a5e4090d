"""The queue model against a reference written in the tests from Kueue's source
(tests/kueue_reference.py), on 500 random Kueue states drawn from fixed seeds (the same
states on every run, in seconds): tree-shaped cohorts (Cohort objects with their own
quota, borrowing and lending limits, nested two deep, queues at every level and in none),
creation times apart from start times, namespace selectors (unset, ``{}``, by label, by
name), queues whose resource groups cover no GPU, LocalQueues in two namespaces each,
``fairSharing`` weights on queues and cohorts (0, 0.5, 1, 2), Kueue's fair sharing on
in half the states (each strategy alone and both; classic preemption in the others, where
the weights decide nothing), every preemption policy, and several GPU flavors in one ClusterQueue (ResourceFlavors with and
without nodeLabels, quotas per flavor in queues and cohorts, both flavorFungibility
policies, a tainted spot flavor that half the jobs tolerate, pending jobs pinned by
nodeSelector, running pods on nodes of their flavor).
Each state goes in as the objects ``--objects`` reads, and
the same records go through the collector's store and ``run_quota`` (``--db``); both
must name, job by job, what the reference says: admitted, never fits, refused for its
namespace, for a resource its queue lacks or for no flavor suiting it, admitted or
preempting in which flavor, preempting whom, or waiting.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from gpuscope.analytics.queueing.queue_fair import FairSharing
from gpuscope.analytics.queueing.queues import judge
from gpuscope.analytics.queueing.quota import run_quota
from gpuscope.collector.cluster.inventory_records import (
    NodeInfo,
    PodInfo,
    QuotaInfo,
    node_from_json,
    pod_from_json,
)
from gpuscope.collector.cluster.queue_records import quotas_from_objects
from gpuscope.collector.storage.store import Store
from gpuscope.core.kube_objects import objects_from_documents
from gpuscope.core.settings import AnalyticsSettings
from tests.kueue_objects import (
    GPU,
    KUEUE,
    UNSET,
    cluster_queue,
    kubectl_list,
    local_queue,
    namespace,
    node,
    pod,
    resource_flavor,
)
from tests.kueue_reference import KueueReference, Outcome, RCohort, RJob, RQueue

STATES = 500
RECLAIM = ["Never", "LowerPriority", "Any"]
WITHIN = ["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
#: Cohort objects that may exist: (name, parent).
TREE = [("org", None), ("east", "org"), ("west", "org"), ("vision", "east"), ("lab", None)]
KIND = {
    "kueue.fits_quota": "fits",
    "kueue.never_fits": "never_fits",
    "kueue.namespace_not_selected": "namespace",
    "kueue.resource_not_covered": "no_gpu",
    "kueue.no_matching_flavor": "no_flavor",
}
PRODUCT = "nvidia.com/gpu.product"
#: ResourceFlavors: nodeLabels of each; the node a running pod of each flavor is on.
FLAVORS = {"h100": {PRODUCT: "H100"}, "a100": {PRODUCT: "A100"}, "default-flavor": {},
           "spot": {PRODUCT: "H100", "pool": "spot"}}  # fmt: skip
#: Flavors whose nodes carry the spot taint (the flavor's nodeTaints).
TAINTED = frozenset({"spot"})
SPOT_TAINT = {"key": "spot", "value": "true", "effect": "NoSchedule"}
NODES = {"node-h100": {PRODUCT: "H100"}, "node-a100": {PRODUCT: "A100"},
         "node-default-flavor": {PRODUCT: "L4"}, "node-spot": {PRODUCT: "H100", "pool": "spot"}}  # fmt: skip
FUNGIBILITY = [("Borrow", "TryNextFlavor"), ("TryNextFlavor", "TryNextFlavor"),
               ("Borrow", "Preempt"), ("TryNextFlavor", "Preempt")]  # fmt: skip
PINS: list[dict[str, str]] = [{}, {}, {}, {PRODUCT: "H100"}, {PRODUCT: "A100"}, {PRODUCT: "L4"}]
S2A, S2B = "LessThanOrEqualToFinalShare", "LessThanInitialShare"
#: Kueue's fairSharing.preemptionStrategies in a state (None: fair sharing off).
FAIR: list[list[str] | None] = [None, None, None, [S2A, S2B], [S2A, S2B], [S2A], [S2B]]
T0 = datetime(2026, 11, 23, 8, 0)


class State:
    """One random state: the reference's parameters and the objects gpuscope reads."""

    def __init__(self, seed: int, prefix: str = "") -> None:
        """``prefix`` goes before every name (queues, cohorts, namespaces, jobs), so that
        states can share one cluster without touching each other."""
        rng = random.Random(seed)
        tree = [(prefix + n, prefix + p if p else None) for n, p in TREE]
        self.cohorts = [
            RCohort(name, rng.randint(0, 6), parent,
                    rng.choice([None, None, rng.randint(0, 6)]) if parent else None,
                    rng.choice([None, None, rng.randint(0, 6)]) if parent else None)
            for name, parent in tree if rng.random() < 0.7
        ]  # fmt: skip
        for c in self.cohorts:  # some cohorts hold quota in several flavors
            if rng.random() < 0.5:
                c.flavors = {
                    f: (rng.randint(0, 6),
                        rng.choice([None, rng.randint(0, 6)]) if c.parent else None,
                        rng.choice([None, rng.randint(0, 6)]) if c.parent else None)
                    for f in rng.sample(sorted(FLAVORS), rng.randint(1, 3))
                }  # fmt: skip
        names = [c.name for c in self.cohorts] + [prefix + "solo"]
        self.labels: dict[str, dict[str, str]] = {}
        self.selectors: dict[str, Any] = {}
        self.queues: list[RQueue] = []
        for i in range(rng.randint(2, 6)):
            name = f"{prefix}cq-{i}"
            cohort = rng.choice([*names, *names, None])
            nominal = rng.randint(0, 10)
            reclaim = rng.choice(RECLAIM)
            borrow = rng.choice(["Never", "LowerPriority"]) if reclaim != "Never" else "Never"
            for ns in (f"{name}-a", f"{name}-b"):
                self.labels[ns] = {"team": rng.choice(["red", "blue"])}
            selector, admits = self._selector(rng, name)
            self.selectors[name] = selector
            self.queues.append(RQueue(
                name, nominal, cohort,
                rng.choice([None, rng.randint(0, 10)]) if cohort else None,
                rng.choice([None, rng.randint(0, nominal)]) if cohort else None,
                reclaim, rng.choice(WITHIN), borrow,
                rng.choice([None, rng.randint(0, 2)]) if borrow != "Never" else None,
                rng.random() > 0.1, admits,
            ))  # fmt: skip
            if rng.random() < 0.5:  # several GPU flavors, tried in this order
                q = self.queues[-1]
                q.flavors = [
                    (f, n := rng.randint(0, 8),
                     rng.choice([None, rng.randint(0, 8)]) if cohort else None,
                     rng.choice([None, rng.randint(0, n)]) if cohort else None)
                    for f in rng.sample(sorted(FLAVORS), rng.randint(2, 3))
                ]  # fmt: skip
                q.fungibility = rng.choice(FUNGIBILITY)
        # Kueue's fairSharing weights on some queues and cohorts: with fair sharing off in
        # Kueue's configuration (classic preemption) they must change no decision
        self.weights = {
            n: str(rng.choice(["0", "0.5", "1", "2"]))
            for n in [q.name for q in self.queues] + [c.name for c in self.cohorts]
            if rng.random() < 0.4
        }
        self.fair = rng.choice(FAIR)
        if self.fair:  # fair sharing states: more queues that may reclaim, more borrowing
            for q in self.queues:
                if q.reclaim == "Never" and rng.random() < 0.9:
                    q.reclaim = "Any"
        minutes = iter(rng.sample(range(1, 500), 60))
        tolerant = random.Random(f"{seed}-tolerations")  # which jobs tolerate the spot taint
        ref = self.reference([])
        self.running: list[RJob] = []
        for k in range(rng.randint(2, 36 if self.fair else 16)):  # admitted where they fit
            q = rng.choice(self.queues)
            created = next(minutes)
            j = RJob(q.name, rng.choice([f"{q.name}-a", f"{q.name}-b"]), f"{prefix}run-{k}",
                     rng.randint(1, 8), rng.randint(0, 2), created,
                     created + rng.randint(0, 120), tolerates=tolerant.random() < 0.5)  # fmt: skip
            admitted = ref.admit(j)
            if admitted.kind == "fits":
                j.flavor = admitted.flavor
                self.running.append(j)
        self.pending = [
            RJob(q.name, rng.choice([f"{q.name}-a", f"{q.name}-b"]), f"{prefix}wait-{k}",
                 rng.randint(1, 8), rng.randint(0, 3), next(minutes),
                 selector=dict(rng.choice(PINS)), tolerates=tolerant.random() < 0.5)
            for k, q in enumerate(rng.choices(self.queues, k=rng.randint(1, 5)))
        ]  # fmt: skip

    def _selector(self, rng: random.Random, name: str) -> tuple[Any, frozenset[str] | None]:
        mine = [f"{name}-a", f"{name}-b"]
        roll = rng.random()
        if roll < 0.55:
            return {}, None
        if roll < 0.65:
            return UNSET, frozenset()
        if roll < 0.82:
            team = rng.choice(["red", "blue"])
            return {"matchLabels": {"team": team}}, frozenset(
                ns for ns, labels in self.labels.items() if labels["team"] == team
            )
        pick = rng.sample(mine, rng.randint(1, 2))
        expr = {"key": "kubernetes.io/metadata.name", "operator": "In", "values": pick}
        return {"matchExpressions": [expr]}, frozenset(pick)

    # -- what gpuscope reads -------------------------------------------------------------------
    def objects(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [namespace(ns, labels) for ns, labels in self.labels.items()]
        for q in self.queues:
            pre: dict[str, Any] = {"reclaimWithinCohort": q.reclaim, "withinClusterQueue": q.within}
            if q.borrow != "Never":
                pre["borrowWithinCohort"] = {"policy": q.borrow}
                if q.threshold is not None:
                    pre["borrowWithinCohort"]["maxPriorityThreshold"] = q.threshold
            cq = cluster_queue(q.name, q.nominal, q.cohort, preemption=pre,
                               borrowing_limit=q.borrowing, lending_limit=q.lending,
                               namespace_selector=self.selectors[q.name],
                               gpu_resource=q.covers_gpu)  # fmt: skip
            if q.flavors is not None and q.covers_gpu:
                cq["spec"]["resourceGroups"][0]["flavors"] = [
                    {"name": f, "resources": [_gpu_quota(n, b, le)]} for f, n, b, le in q.flavors
                ]
                cq["spec"]["resourceGroups"][0]["coveredResources"] = [GPU]
                cq["spec"]["flavorFungibility"] = dict(
                    zip(("whenCanBorrow", "whenCanPreempt"), q.fungibility, strict=True)
                )
            if q.name in self.weights:  # read as over_quota_weight; classic preemption
                cq["spec"]["fairSharing"] = {"weight": self.weights[q.name]}
            out.append(cq)
            out += [local_queue(f"{q.name}-a", q.name), local_queue(f"{q.name}-b", q.name)]
        for name, labels in FLAVORS.items():
            rf = resource_flavor(name)
            if labels:
                rf["spec"]["nodeLabels"] = labels
            if name in TAINTED:
                rf["spec"]["nodeTaints"] = [SPOT_TAINT]
            out.append(rf)
        for c in self.cohorts:
            obj = _cohort_object(c)
            if c.name in self.weights:
                obj["spec"]["fairSharing"] = {"weight": self.weights[c.name]}
            out.append(obj)
        return out

    def pods(self) -> list[PodInfo]:
        out = []
        for j in self.running + self.pending:
            running = j in self.running
            obj = pod(j.namespace, j.name, j.gpus, f"node-{j.flavor}" if running else None,
                      job=j.name, minute=j.created, started=j.started if running else None,
                      priority=j.priority)  # fmt: skip
            if j.selector:
                obj["spec"]["nodeSelector"] = dict(j.selector)
            if j.tolerates:
                obj["spec"]["tolerations"] = [{**SPOT_TAINT, "operator": "Equal"}]
            out.append(pod_from_json(obj))
        return out

    def quotas(self) -> list[QuotaInfo]:
        return quotas_from_objects(objects_from_documents([("o", kubectl_list(self.objects()))]))

    def reference(self, running: list[RJob]) -> KueueReference:
        weights = {n: float(w) for n, w in self.weights.items()}
        return KueueReference(self.queues, self.cohorts, running, FLAVORS, self.fair, weights,
                              TAINTED)  # fmt: skip

    def fair_sharing(self) -> FairSharing:
        return FairSharing(self.fair is not None, tuple(self.fair or (S2A, S2B)))

    def expected(self) -> dict[str, Outcome]:
        ref = self.reference(self.running)
        order = sorted(self.pending, key=lambda j: (-j.priority, j.created, j.namespace))
        return {f"Job/{j.name}": ref.admit(j) for j in order}


def _gpu_quota(nominal: int, borrowing: int | None, lending: int | None) -> dict[str, Any]:
    gpu: dict[str, Any] = {"name": GPU, "nominalQuota": nominal}
    if borrowing is not None:
        gpu["borrowingLimit"] = borrowing
    if lending is not None:
        gpu["lendingLimit"] = lending
    return gpu


def nodes() -> list[NodeInfo]:
    """The nodes running pods are on: one per flavor, labelled as its ResourceFlavor."""
    out = []
    for name, labels in NODES.items():
        obj = node(name, model=labels[PRODUCT])
        obj["metadata"]["labels"].update(labels)
        out.append(node_from_json(obj))
    return out


def _node_labels() -> dict[str, dict[str, str]]:
    return {n.name: dict(n.labels) for n in nodes()}


def _cohort_object(c: RCohort) -> dict[str, Any]:
    quotas = c.flavors or {"default-flavor": (c.nominal, c.borrowing, c.lending)}
    spec: dict[str, Any] = {"resourceGroups": [{"coveredResources": [GPU], "flavors": [
        {"name": f, "resources": [_gpu_quota(*q)]} for f, q in quotas.items()]}]}  # fmt: skip
    if c.parent:
        spec["parent"] = c.parent
    return {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": c.name}, "spec": spec}


def _outcome(rule: str, victims: list[tuple[str, str]], flavor: str) -> Outcome:
    if rule == "kueue.fits_quota":
        return Outcome("fits", flavor=flavor)
    if rule in KIND:
        return Outcome(KIND[rule])
    return Outcome("preempt", victims, flavor) if victims else Outcome("wait")


def test_the_states_cover_what_they_claim() -> None:
    """The fixed states hold every shape the docstring names, and outcomes of each kind
    (a generator that drifted into trivial states would make the agreement hollow)."""
    kinds: set[str] = set()
    depth2 = lower_newer = later_flavor = preempt_later = fair_preempt = fair_other_queue = 0
    spot_admitted = spot_refused = 0
    for seed in range(STATES):
        s = State(seed)
        kinds |= {o.kind for o in s.expected().values()}
        depth2 += any(c.name == "vision" for c in s.cohorts) and any(
            q.cohort == "vision" for q in s.queues)  # fmt: skip
        lower_newer += any(j.started > j.created for j in s.running)
        firsts = {q.name: q.quotas()[0][0] for q in s.queues}
        by_name = {q.name: q for q in s.queues}
        outcomes = s.expected()
        jobs = {f"Job/{j.name}": j for j in s.pending}
        later = [o for k, o in outcomes.items() if o.flavor and o.flavor != firsts[jobs[k].queue]]
        later_flavor += len(later)
        spot_admitted += sum(o.flavor == "spot" for o in outcomes.values())
        spot_refused += sum(
            not jobs[k].tolerates
            and "spot" in [f for f, *_ in by_name[jobs[k].queue].quotas()]
            and o.kind not in ("namespace", "no_gpu")
            for k, o in outcomes.items()
        )
        if s.fair is not None:
            preempting = [o for o in outcomes.values() if o.kind == "preempt"]
            fair_preempt += len(preempting)
            fair_other_queue += sum(
                any(ns.rsplit("-", 1)[0] != jobs[k].queue for ns, _ in o.victims)
                for k, o in outcomes.items()
                if o.kind == "preempt"
            )
        preempt_later += sum(o.kind == "preempt" for o in later)
    assert kinds == {"fits", "never_fits", "namespace", "no_gpu", "no_flavor", "preempt", "wait"}
    assert depth2 > 50 and lower_newer > 400
    assert later_flavor > 100 and preempt_later > 10
    assert fair_preempt > 30 and fair_other_queue > 15
    assert spot_admitted > 30 and spot_refused > 30


def test_objects_path_agrees_with_kueues_source_on_500_states() -> None:
    """``--objects``: who waits on what and who would be preempted, job by job."""
    disagree = []
    for seed in range(STATES):
        s = State(seed)
        got = {
            v.job: _outcome(
                v.rule, sorted((x.namespace, x.job.split("/", 1)[1]) for x in v.victims), v.flavor
            )
            for v in judge(
                s.pods(), s.quotas(), node_labels=_node_labels(), fair_sharing=s.fair_sharing()
            ).verdicts
        }
        if got != s.expected():
            disagree.append(seed)
    assert disagree == []


def test_stored_inventory_path_agrees_on_500_states(tmp_path: Path) -> None:
    """``--db``: the states side by side in one cluster (each its own names, so none
    touches another), written through the collector's store as one inventory snapshot and
    read back by ``run_quota``; one cluster per fair sharing configuration (it is
    cluster-wide: the ``analytics.kueue_fair_sharing`` settings)."""
    states = [State(seed, prefix=f"s{seed}-") for seed in range(STATES)]
    want: dict[str, Outcome] = {}
    got: dict[str, Outcome] = {}
    for config in {tuple(s.fair) if s.fair else () for s in states}:
        group = [s for s in states if tuple(s.fair or ()) == config]
        for s in group:
            want.update(s.expected())
        settings = AnalyticsSettings(
            kueue_fair_sharing=bool(config),
            kueue_fair_sharing_strategies=list(config or (S2A, S2B)),
        )
        with Store.open(tmp_path / f"q{len(config)}{config[:1]}.duckdb") as store:
            store.record_inventory(T0, nodes=nodes(), pods=[p for s in group for p in s.pods()],
                                   quotas=[q for s in group for q in s.quotas()])  # fmt: skip
            found = run_quota(store.cursor(), T0, settings, window=timedelta(minutes=1))
        got.update({
            v["job"]: _outcome(v["rule"], sorted((x["namespace"], x["job"].split("/", 1)[1])
                                                 for x in v["victims"]), v["flavor"])
            for v in found.summary["pending_jobs"]
        })  # fmt: skip
    assert len(got) == len(want) > 1000
    assert {k for k in want if got[k] != want[k]} == set()
