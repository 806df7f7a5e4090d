"""Generated cluster histories for the consistency suite, written through the collector's
own write paths (``record_inventory`` for nodes, pods and quotas; ``append_cycle`` of the
agents' series), so the detectors, the weekly report and the gauges all read what a
collector would have stored.

A history: nodes of a few GPUs; pods that each hold one GPU, whole or a fraction of it
(several fractions may share a GPU), busy at ``level`` of what they hold up to a step and
idle after it; pods that start later are Pending (unbound) until then, so the quota view
has demand; steps with no scrape at all (the collector down); any scrape interval. Each
GPU reports NVML utilization (the sum of its holders' use), each holder its own
per-process utilization, as the agents do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo, QuotaInfo
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store

T0 = datetime(2025, 3, 4, 10, 0)  # a Tuesday: well inside an ISO week
EPOCH = datetime(1970, 1, 1)
UTIL = "gpuscope_gpu_utilization_ratio"
INFO = "gpuscope_gpu_workload_info"
WUTIL = "gpuscope_gpu_workload_utilization_ratio"


@dataclass(frozen=True)
class PodPlan:
    namespace: str
    name: str
    node: str
    gpu: int
    share: float  # 1.0: a whole GPU
    kind: str  # interactive, training, inference
    start: int  # first step it holds its GPU (Pending before)
    busy_until: int  # last busy step (-1: never busy)
    level: float  # busy level, as a share of what it holds

    def use(self, k: int) -> float:
        """Its use of the whole GPU at step ``k`` (0 when idle)."""
        return self.share * self.level if k <= self.busy_until else 0.0


@dataclass(frozen=True)
class History:
    step_s: int
    steps: int
    nodes: tuple[str, ...]
    gpus_per_node: int
    pods: tuple[PodPlan, ...]
    gaps: frozenset[int] = frozenset()
    guarantees: tuple[tuple[str, float], ...] = field(default=())

    def ts(self, k: int) -> datetime:
        return T0 + timedelta(seconds=k * self.step_s)

    @property
    def end(self) -> datetime:
        return self.ts(self.steps - 1)

    def uuid(self, node: str, gpu: int) -> str:
        return f"GPU-{node}-{gpu}"


def _pod_info(h: History, p: PodPlan, k: int) -> PodInfo:
    running = k >= p.start
    return PodInfo(
        namespace=p.namespace, name=p.name, uid=p.name,
        node=p.node if running else None, phase="Running" if running else "Pending",
        start_time=(h.ts(p.start) - EPOCH).total_seconds() if running else None,
        gpu_request=1 if p.share >= 1 else 0,
        gpu_fraction=p.share if p.share < 1 else None,
        project=p.namespace, owner_kind="Job", owner_name=p.name,
        pending_reason="" if running else "Unschedulable",
    )  # fmt: skip


def write(store: Store, h: History) -> None:
    """Store the history: the inventory at step 0 and at every step a pod starts, and a
    scrape of every node at every step that is not a gap."""
    nodes = [
        NodeInfo(name=n, gpu_model="H100", allocatable_gpus=h.gpus_per_node, cpu_milli=64000)
        for n in h.nodes
    ]
    quotas = [QuotaInfo(project=p, guaranteed_gpus=g, source="config") for p, g in h.guarantees]
    changes = sorted({0, *(p.start for p in h.pods if 0 < p.start < h.steps)})
    # the scrapes between two inventory changes in one transaction (``append_cycles``, held
    # equal to ``append_cycle`` one cycle at a time by tests/unit/test_store_bulk.py)
    run: list[list[tuple[Batch, float]]] = []
    for k in range(h.steps):
        if k in changes:
            if run:
                store.append_cycles(run)
                run = []
            pods = [_pod_info(h, p, k) for p in h.pods]
            store.record_inventory(h.ts(k), nodes=nodes if k == 0 else None, pods=pods,
                                   quotas=quotas if k == 0 else None)  # fmt: skip
        if k in h.gaps:
            continue
        ms = int(h.ts(k).replace(tzinfo=UTC).timestamp() * 1000)
        cycle = []
        for node in h.nodes:
            names: list[str] = []
            labels: list[tuple[tuple[str, str], ...]] = []
            values: list[float] = []
            for g in range(h.gpus_per_node):
                gpu = {"node": node, "gpu": str(g), "uuid": h.uuid(node, g), "mig_instance": ""}
                on = [p for p in h.pods if p.node == node and p.gpu == g and p.start <= k]
                names.append(UTIL)
                labels.append(tuple(sorted(gpu.items())))
                values.append(min(1.0, sum(p.use(k) for p in on)))
                for p in on:
                    who = gpu | {"namespace": p.namespace, "pod": p.name, "container": "main"}
                    info = who | {"workload_kind": p.kind, "project": p.namespace,
                                  "interactive": str(p.kind == "interactive").lower()}  # fmt: skip
                    names += [INFO, WUTIL]
                    labels += [tuple(sorted(info.items())), tuple(sorted(who.items()))]
                    values += [1.0, p.use(k)]
            cycle.append((Batch(node, ms, names, labels, values, {}), 0.01))
        run.append(cycle)
    if run:
        store.append_cycles(run)


@st.composite
def histories(draw: st.DrawFn) -> History:
    """A small random history: 2 nodes of 2 GPUs, up to 5 pods (fractions share GPUs),
    a scrape interval of 1 s, 15 s, 60 s or 5 minutes, 60-90 steps, a gap or none."""
    step_s = draw(st.sampled_from([1, 15, 60, 300]))
    steps = draw(st.integers(60, 90))
    nodes = ("n1", "n2")
    pods: list[PodPlan] = []
    free = {(n, g): 1.0 for n in nodes for g in range(2)}
    for i in range(draw(st.integers(1, 5))):
        slot = draw(st.sampled_from(sorted(free)))
        share = draw(st.sampled_from([1.0, 0.5, 0.25]))
        if free[slot] < share - 1e-9:
            continue
        free[slot] -= share
        ns = draw(st.sampled_from(["research", "serving", "train"]))
        kind = {"research": "interactive", "serving": "inference", "train": "training"}[ns]
        pods.append(
            PodPlan(
                namespace=ns, name=f"{ns}-{i}", node=slot[0], gpu=slot[1], share=share,
                kind=kind, start=draw(st.sampled_from([0, 0, steps // 3])),
                busy_until=draw(st.integers(-1, steps)),
                level=draw(st.sampled_from([0.019, 0.2, 0.8])),
            )
        )  # fmt: skip
    gap_at = draw(st.integers(0, steps))
    gap_len = draw(st.sampled_from([0, 0, 5]))
    gaps = frozenset(range(gap_at, min(steps - 1, gap_at + gap_len)))
    guarantees = (("research", 1.0), ("serving", 0.5), ("train", 1.0))
    return History(step_s, steps, nodes, 2, tuple(pods), gaps, guarantees)
