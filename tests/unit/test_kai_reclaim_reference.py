"""KAI-Scheduler's reclaim (gpuscope/analytics/queueing/kai_reclaim.py) against the
reference written in the tests from KAI's source (tests/kai_reference.py ``KaiReclaim``),
on 500 random states from fixed seeds: departments with child queues and queues at the
top, deserved quotas, over-quota weights (0 included), limits, running jobs of
preemptible (50) and non-preemptible (100, 125) priorities filling most of the cluster,
and pending jobs of both kinds. Each state goes in as the objects ``--objects`` reads
(every state) and through the collector's store and ``run_quota`` (``--db``, every tenth);
both must say, job by job, what the reference does: runs on free GPUs, held by its limit,
beyond its fair share, reclaiming whom, or blocked."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

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
from tests.kai_reference import KaiReclaim, KJob, KQueue, fair_shares
from tests.kueue_objects import kubectl_list, node, pod, rfc3339

STATES = 500
T0 = datetime(2026, 11, 23, 8, 0)
OUTCOME = {
    "kai.fits": "fits",
    "kai.limit": "limit",
    "kai.over_fair_share": "over_fair_share",
    "kai.reclaim": "reclaim",
    "kai.reclaim_blocked": "blocked",
}


class ReclaimState:
    def __init__(self, seed: int, prefix: str = "") -> None:
        rng = random.Random(seed)
        self.prefix = prefix
        minute = iter(rng.sample(range(0, 400), 60))
        self.queues: list[KQueue] = []
        tops = [f"{prefix}dept-{i}" for i in range(rng.randint(1, 3))]
        for name in tops:
            self.queues.append(self._queue(rng, name, None, next(minute)))
        leaves = []
        for i in range(rng.randint(2, 6)):
            parent = rng.choice([*tops, *tops, None])
            q = self._queue(rng, f"{prefix}q-{i}", parent, next(minute))
            self.queues.append(q)
            leaves.append(q)
        self.nodes = [f"{prefix}n-{i}" for i in range(rng.randint(2, 5))]
        self.capacity = 8.0 * len(self.nodes)
        self.running: list[KJob] = []
        held = 0.0
        for k in range(rng.randint(2, 14)):
            gpus = float(rng.choice([1, 2, 4, 8]))
            if held + gpus > self.capacity:
                continue
            held += gpus
            self.running.append(KJob(rng.choice(leaves).name, f"{prefix}run-{k}", gpus,
                                     rng.choice([50, 50, 50, 100, 125]), next(minute)))  # fmt: skip
        self.pending = [
            KJob(rng.choice(leaves).name, f"{prefix}wait-{k}", float(rng.choice([1, 2, 4, 8])),
                 rng.choice([50, 50, 100]), next(minute))
            for k in range(rng.randint(1, 5))
        ]  # fmt: skip
        self.free = max(0.0, self.capacity - held)

    @staticmethod
    def _queue(rng: random.Random, name: str, parent: str | None, created: int) -> KQueue:
        deserved = rng.choice([0, 0, 1, 2, 4, 8])
        limit = rng.choice([None, None, deserved + rng.randint(0, 8)])
        return KQueue(name, parent, deserved, limit, rng.choice([0, 1, 1, 2, 3]), created)

    def shares(self) -> dict[str, float]:
        queues = [KQueue(**vars(q)) for q in self.queues]
        for q in queues:
            q.own_request = sum(j.gpus for j in self.running + self.pending if j.queue == q.name)
        return fair_shares(queues, self.capacity)

    def expected(self) -> dict[str, tuple[str, list[str]]]:
        ref = KaiReclaim(self.queues, self.shares(), self.running)
        free, out = self.free, {}
        for j in sorted(self.pending, key=lambda j: (-j.priority, j.started, j.name)):
            kind, victims, free = ref.judge(j.queue, j, free)
            out[f"Job/{j.name}"] = (kind, victims if kind == "reclaim" else [])
        return out

    # -- what gpuscope reads -------------------------------------------------------------------
    def objects(self) -> list[dict[str, Any]]:
        out = []
        for q in self.queues:
            gpu = {"quota": q.deserved, "limit": -1 if q.limit is None else q.limit,
                   "overQuotaWeight": q.weight}  # fmt: skip
            spec: dict[str, Any] = {"resources": {"gpu": gpu}}
            if q.parent:
                spec["parentQueue"] = q.parent
            out.append({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
                        "metadata": {"name": q.name, "creationTimestamp": rfc3339(q.created)},
                        "spec": spec})  # fmt: skip
        return out

    def node_infos(self) -> list[NodeInfo]:
        return [node_from_json(node(n, 8)) for n in self.nodes]

    def pods(self) -> list[PodInfo]:
        out = []
        for j, running in [(j, True) for j in self.running] + [(j, False) for j in self.pending]:
            p = pod("kai-ns", j.name, int(j.gpus), self.nodes[0] if running else None,
                    job=j.name, queue=None, minute=int(j.started), priority=j.priority)  # fmt: skip
            p["metadata"]["labels"]["kai.scheduler/queue"] = j.queue
            out.append(pod_from_json(p))
        return out

    def quotas(self) -> list[QuotaInfo]:
        return quotas_from_objects(objects_from_documents([("o", kubectl_list(self.objects()))]))


def _got(rule: str, victims: list[str]) -> tuple[str, list[str]]:
    return OUTCOME.get(rule, rule), sorted(v.split("/", 1)[1] for v in victims)


def test_the_states_cover_what_they_claim() -> None:
    """Every outcome occurs; reclaims by preemptible and non-preemptible jobs, with
    victims in the same department and across departments."""
    kinds: dict[str, int] = {}
    fixed_reclaim = same = cross = 0
    for seed in range(STATES):
        s = ReclaimState(seed)
        parent = {q.name: q.parent for q in s.queues}
        queue_of = {j.name: j.queue for j in s.running + s.pending}
        jobs = {f"Job/{j.name}": j for j in s.pending}
        for key, (kind, victims) in s.expected().items():
            kinds[kind] = kinds.get(kind, 0) + 1
            fixed_reclaim += kind == "reclaim" and jobs[key].priority >= 100
            mine = parent[jobs[key].queue]
            for v in victims:
                theirs = parent[queue_of[v]]
                same += bool(mine) and theirs == mine
                cross += not (bool(mine) and theirs == mine)
    assert set(kinds) == set(OUTCOME.values())
    assert kinds["reclaim"] > 100 and kinds["blocked"] > 30 and fixed_reclaim > 5
    assert same > 20 and cross > 50


def test_objects_path_agrees_with_kais_source_on_500_states() -> None:
    disagree = []
    for seed in range(STATES):
        s = ReclaimState(seed)
        state = judge(s.pods(), s.quotas(), free_gpus=s.free, capacity_gpus=s.capacity)
        got = {v.job: _got(v.rule, [x.job for x in v.victims]) for v in state.verdicts}
        if got != s.expected():
            disagree.append(seed)
    assert disagree == []


def test_stored_inventory_path_agrees(tmp_path: Path) -> None:
    """``--db``: every tenth state its own snapshot a minute apart (its nodes are the
    capacity, what they do not hold is free)."""
    disagree = []
    with Store.open(tmp_path / "kai.duckdb") as store:
        for seed in range(0, STATES, 10):
            s = ReclaimState(seed, prefix=f"s{seed}-")
            at = T0 + timedelta(minutes=seed)
            store.record_inventory(at, nodes=s.node_infos(), pods=s.pods(), quotas=s.quotas())
            found = run_quota(store.cursor(), at, AnalyticsSettings(), window=timedelta(minutes=1))
            got = {
                v["job"]: _got(v["rule"], [x["job"] for x in v["victims"]])
                for v in found.summary["pending_jobs"]
            }
            if got != s.expected():
                disagree.append(seed)
    assert disagree == []
