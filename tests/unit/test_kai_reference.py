"""KAI-Scheduler's fair shares (gpuscope/analytics/queueing/kai_share.py) against a
reference written in the tests from KAI's source (tests/kai_reference.py), on 500 random
states from fixed seeds: departments (top queues) with child queues and queues at the
top, deserved quotas, over-quota weights (0 included), limits (unlimited or not, below
the quota too), queue creation times, running and pending jobs of whole and half GPUs,
nodes not ready, and GPUs held by pods outside KAI. Each state goes in as the objects
``--objects`` reads and through the collector's store and ``run_quota`` (``--db``);
both must give every queue the fair share the reference does."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from gpuscope.analytics.queueing.queues import judge
from gpuscope.analytics.queueing.quota import quota_analysis, run_quota
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
from tests.kai_reference import KQueue, fair_shares
from tests.kueue_objects import kubectl_list, node, pod, rfc3339

STATES = 500
T0 = datetime(2026, 11, 23, 8, 0)


class KaiState:
    def __init__(self, seed: int, prefix: str = "") -> None:
        rng = random.Random(seed)
        self.prefix = prefix
        self.queues: list[KQueue] = []
        minute = iter(rng.sample(range(0, 300), 40))
        tops = [f"{prefix}dept-{i}" for i in range(rng.randint(1, 3))]
        for name in tops:
            self.queues.append(self._queue(rng, name, None, next(minute)))
        for i in range(rng.randint(1, 6)):
            parent = rng.choice([*tops, *tops, None])
            self.queues.append(self._queue(rng, f"{prefix}q-{i}", parent, next(minute)))
        leaves = [q for q in self.queues if not any(c.parent == q.name for c in self.queues)]
        self.nodes = [(f"{prefix}n-{i}", rng.choice([4, 8, 8]), rng.random() > 0.1)
                      for i in range(rng.randint(1, 5))]  # fmt: skip
        self.jobs: list[tuple[str, str, float, bool]] = []  # (queue, name, gpus, running)
        for k in range(rng.randint(0, 12)):
            q = rng.choice(leaves)
            gpus = rng.choice([0.5, 1, 2, 4, 8])
            self.jobs.append((q.name, f"{prefix}j-{k}", gpus, rng.random() < 0.5))
            q.own_request += gpus
        #: GPUs held by pods no KAI queue has (another scheduler's)
        self.outside = rng.choice([0, 0, 1, 4])

    def _queue(self, rng: random.Random, name: str, parent: str | None, created: int) -> KQueue:
        deserved = rng.choice([0, 0, 1, 2, 4, 8])
        limit = rng.choice([None, None, rng.randint(0, 12)])
        return KQueue(name, parent, deserved, limit, rng.choice([0, 1, 1, 2, 3]), created)

    @property
    def capacity(self) -> float:
        return float(sum(g for _, g, ready in self.nodes if ready))

    def expected(self) -> dict[str, float]:
        total = max(0.0, self.capacity - self.outside)
        return fair_shares([KQueue(**vars(q)) for q in self.queues], total)

    # -- what gpuscope reads -------------------------------------------------------------------
    def objects(self) -> list[dict[str, Any]]:
        out = []
        for q in self.queues:
            gpu = {"quota": q.deserved, "limit": -1 if q.limit is None else q.limit,
                   "overQuotaWeight": q.weight}  # fmt: skip
            spec: dict[str, Any] = {"resources": {
                "gpu": gpu, "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}  # fmt: skip
            if q.parent:
                spec["parentQueue"] = q.parent
            out.append({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
                        "metadata": {"name": q.name, "creationTimestamp": rfc3339(q.created)},
                        "spec": spec})  # fmt: skip
        return out

    def node_infos(self) -> list[NodeInfo]:
        out = []
        for name, gpus, ready in self.nodes:
            obj = node(name, gpus)
            if not ready:
                obj["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
            out.append(node_from_json(obj))
        return out

    def pods(self) -> list[PodInfo]:
        first = self.nodes[0][0]
        out = []
        for queue, name, gpus, running in self.jobs:
            whole = int(gpus) if gpus >= 1 else 1
            p = pod("kai-ns", name, whole, first if running else None, job=name, queue=None)
            p["metadata"]["labels"]["kai.scheduler/queue"] = queue
            if gpus < 1:  # half a GPU: KAI's gpu-fraction annotation
                p["metadata"]["annotations"] = {"gpu-fraction": str(gpus)}
                res = p["spec"]["containers"][0]["resources"]
                res["limits"].pop("nvidia.com/gpu")
                res["requests"].pop("nvidia.com/gpu")
            out.append(pod_from_json(p))
        if self.outside:
            out.append(pod_from_json(pod("other", f"{self.prefix}other", self.outside, first,
                                         job=f"{self.prefix}other", queue=None)))  # fmt: skip
        return out

    def quotas(self) -> list[QuotaInfo]:
        return quotas_from_objects(objects_from_documents([("o", kubectl_list(self.objects()))]))


def _shares(summary: dict[str, Any], names: list[str]) -> dict[str, float]:
    return {n: float(summary["projects"][n]["fair_share_gpus"]) for n in names}


def test_the_states_cover_what_they_claim() -> None:
    nested = zero_weight = limited = fractional = over = 0
    for seed in range(STATES):
        s = KaiState(seed)
        nested += any(q.parent for q in s.queues)
        zero_weight += any(q.weight == 0 for q in s.queues)
        limited += any(q.limit is not None and q.limit < q.deserved for q in s.queues)
        fractional += any(g < 1 for _, _, g, _ in s.jobs)
        shares = s.expected()
        over += any(shares[q.name] > q.deserved for q in s.queues)
    assert min(nested, zero_weight, limited, fractional, over) > 50


def test_objects_path_agrees_with_kais_source_on_500_states() -> None:
    disagree = []
    for seed in range(STATES):
        s = KaiState(seed)
        state = judge(s.pods(), s.quotas(), capacity_gpus=s.capacity)
        found = quota_analysis(state, T0, lambda: {})
        want = s.expected()
        if _shares(found.summary, list(want)) != want:
            disagree.append(seed)
    assert disagree == []


def test_stored_inventory_path_agrees_on_500_states(tmp_path: Path) -> None:
    """``--db``: each state its own snapshot a minute apart (its nodes are the capacity)."""
    disagree = []
    with Store.open(tmp_path / "kai.duckdb") as store:
        for seed in range(0, STATES, 10):  # every tenth: one store write a state
            s = KaiState(seed, prefix=f"s{seed}-")
            at = T0 + timedelta(minutes=seed)
            store.record_inventory(at, nodes=s.node_infos(), pods=s.pods(), quotas=s.quotas())
            found = run_quota(store.cursor(), at, AnalyticsSettings(), window=timedelta(minutes=1))
            want = s.expected()
            if _shares(found.summary, list(want)) != want:
                disagree.append(seed)
    assert disagree == []
