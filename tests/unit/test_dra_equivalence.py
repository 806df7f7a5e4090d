"""One allocation model: the same cluster written twice, once with device-plugin GPUs and
once with DRA devices and claims, gives identical figures.

A random cluster (nodes of whole GPUs, some shared, one MIG node; running pods holding
whole GPUs, fractions and MIG instances on *named* GPUs; pending whole, fractional and MIG
asks) is written by this test, sharing no code with gpuscope:

- as the device plugin sees it: ``nvidia.com/gpu`` / ``nvidia.com/mig-*`` allocatable,
  container requests, the ``gpu-fraction`` annotation, and the GPU indices the agents
  would report;
- as DRA sees it: nodes with no GPU in allocatable, one ResourceSlice per node (shared
  GPUs allow multiple allocations), a claim per holder (from a template, owned by its pod,
  or the scheduler's DRA-backed extended-resource claim), ``consumedCapacity`` for shares,
  claim templates for the pending pods.

Fragmentation, quota, consolidation and what-if figures must be equal.
"""

from __future__ import annotations

import json
import random
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscope.analytics.consolidation.plan import analyze_consolidation
from gpuscope.analytics.placement.allocation import state_from_records
from gpuscope.analytics.placement.allocation_sources import kubectl_records
from gpuscope.analytics.placement.fragmentation import analyze_fragmentation
from gpuscope.analytics.queueing.quota import run_quota
from gpuscope.analytics.whatif.inputs import read_workload, run_policies
from gpuscope.collector.cluster.inventory_records import QuotaInfo
from gpuscope.collector.storage.store import Store
from gpuscope.core.kube_objects import objects_from_documents
from gpuscope.core.settings import AnalyticsSettings, Settings
from tests.fakes import dra_objects as d

AT = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)
PRODUCTS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")
MIG_PROFILE, MIG_PER_GPU = "1g.10gb", 7
PROJECTS = ("alpha", "beta", "gamma")


@dataclass
class Holder:
    namespace: str
    name: str
    node: str | None
    whole: int = 0  # whole GPUs (running: len(gpus))
    share: float = 0.0  # fraction of one GPU
    gpus: list[int] = field(default_factory=list)  # indices held (running)
    mig: list[int] = field(default_factory=list)  # MIG instances held (running)
    mig_ask: int = 0  # MIG instances asked (pending)
    via: str = "template"  # template | extended
    preemptible: bool = False


@dataclass
class Cluster:
    nodes: list[tuple[str, int, str, bool, bool]]  # name, gpus, product, shared, mig
    pods: list[Holder]


def build(seed: int) -> Cluster:
    """A random cluster with every holder on named GPUs (a valid packing)."""
    rnd = random.Random(seed)
    nodes = []
    for i in range(rnd.randint(1, 3)):
        nodes.append((f"n{i}", rnd.choice((2, 4, 8)), rnd.choice(PRODUCTS), rnd.random() < 0.5,
                      False))  # fmt: skip
    if rnd.random() < 0.6:
        nodes.append(("mig0", rnd.randint(1, 2), PRODUCTS[1], False, True))
    pods: list[Holder] = []
    for name, gpus, _, shared, mig in nodes:
        if mig:
            free = list(range(gpus * MIG_PER_GPU))
            for j in range(rnd.randint(0, len(free))):
                inst = free.pop(rnd.randrange(len(free)))
                pods.append(Holder(rnd.choice(PROJECTS), f"{name}-m{j}", name, mig=[inst]))
            continue
        left = [1.0] * gpus
        for j in range(rnd.randint(0, 2 * gpus)):
            ns = rnd.choice(PROJECTS)
            pre = rnd.random() < 0.5
            if shared and rnd.random() < 0.5:
                share = rnd.choice((0.25, 0.5))
                room = [g for g in range(gpus) if left[g] >= share]
                if not room:
                    continue
                g = rnd.choice(room)
                left[g] -= share
                pods.append(Holder(ns, f"{name}-f{j}", name, share=share, gpus=[g],
                                   preemptible=pre))  # fmt: skip
            else:
                k = rnd.choice((1, 1, 2, 4))
                room = [g for g in range(gpus) if left[g] == 1.0]
                if len(room) < k:
                    continue
                taken = rnd.sample(room, k)
                for g in taken:
                    left[g] = 0.0
                via = rnd.choice(("template", "extended"))
                pods.append(Holder(ns, f"{name}-w{j}", name, whole=k, gpus=sorted(taken),
                                   via=via, preemptible=pre))  # fmt: skip
    for j in range(rnd.randint(0, 4)):
        ns = rnd.choice(PROJECTS)
        kind = rnd.choice(("whole", "whole", "share", "mig"))
        if kind == "whole":
            pods.append(Holder(ns, f"wait-{j}", None, whole=rnd.choice((1, 2, 4, 8))))
        elif kind == "share":
            pods.append(Holder(ns, f"wait-{j}", None, share=0.5))
        elif any(n[4] for n in nodes):
            pods.append(Holder(ns, f"wait-{j}", None, mig_ask=rnd.randint(1, 2)))
    return Cluster(nodes, pods)


def labels(h: Holder) -> dict[str, str]:
    out = {"gpuscope.io/workload-type": "batch"}
    if h.preemptible:
        out["gpuscope.io/preemptible"] = "true"
    return out


def device_plugin(c: Cluster) -> tuple[dict[str, Any], dict[str, Any], dict[str, list[int]]]:
    nodes = []
    for name, gpus, product, _, mig in c.nodes:
        n = d.node(name, product=product, labels={"nvidia.com/gpu.memory": "81920"},
                   **({"mig": {MIG_PROFILE: gpus * MIG_PER_GPU}} if mig else {"gpus": gpus}))  # fmt: skip
        nodes.append(n)
    pods, indices = [], {}
    for h in c.pods:
        req: dict[str, str] = {}
        ann: dict[str, str] = {}
        if h.whole:
            req["nvidia.com/gpu"] = str(h.whole)
        if h.share:
            ann["gpu-fraction"] = str(h.share)
        if h.mig or h.mig_ask:
            req[f"nvidia.com/mig-{MIG_PROFILE}"] = str(len(h.mig) or h.mig_ask)
        pods.append(d.pod(h.namespace, h.name, node=h.node, requests=req, annotations=ann,
                          labels=labels(h)))  # fmt: skip
        if h.gpus:
            indices[f"{h.namespace}/{h.name}"] = h.gpus
    return d.kube_list(nodes), d.kube_list(pods), indices


def dra(c: Cluster) -> tuple[dict[str, Any], dict[str, Any], Any]:
    nodes, objects = [], [*d.nvidia_classes(extended=True)]
    for name, gpus, product, shared, mig in c.nodes:
        nodes.append(d.node(name))  # no GPU in allocatable: DRA only
        if mig:
            devices = [
                d.mig_device(i // MIG_PER_GPU, f"GPU-{name}-{i // MIG_PER_GPU}", MIG_PROFILE, 19,
                             i % MIG_PER_GPU, f"MIG-{name}-{i}", product)
                for i in range(gpus * MIG_PER_GPU)
            ]  # fmt: skip
        else:
            devices = [d.gpu_device(i, f"GPU-{name}-{i}", product, 80, shared=shared)
                       for i in range(gpus)]  # fmt: skip
        objects.append(d.resource_slice(name, devices))
    mig_names = {
        (name, i): f"gpu-{i // MIG_PER_GPU}-mig-{MIG_PROFILE.replace('.', '')}-19-{i % MIG_PER_GPU}"
        for name, gpus, _, _, mig in c.nodes if mig for i in range(gpus * MIG_PER_GPU)
    }  # fmt: skip
    pods = []
    for n, h in enumerate(c.pods):
        uid = f"00000000-0000-4000-8000-{n:012d}"
        if h.node is None:  # pending: the ask is its template's
            if h.mig_ask:
                req = d.request("mig", "mig.nvidia.com", h.mig_ask,
                                [d.profile_selector(MIG_PROFILE)])  # fmt: skip
            elif h.share:
                req = d.request(
                    "gpu", "gpu.nvidia.com", capacity={"memory": f"{int(h.share * 80)}Gi"}
                )
            else:
                req = d.request("gpu", "gpu.nvidia.com", h.whole)
            objects.append(d.template(h.namespace, f"{h.name}-t", [req]))
            pods.append(d.pod(h.namespace, h.name, node=None, uid=uid, labels=labels(h),
                              claims=[("dev", None, f"{h.name}-t")]))  # fmt: skip
            continue
        claim_name = f"{h.name}-dev-{n:05d}"
        if h.mig:
            results = [d.result("mig", h.node, mig_names[(h.node, i)]) for i in h.mig]
            req = d.request("mig", "mig.nvidia.com", len(h.mig), [d.profile_selector(MIG_PROFILE)])
        elif h.share:
            results = [d.result("gpu", h.node, f"gpu-{h.gpus[0]}",
                                share_id=f"10000000-0000-4000-8000-{n:012d}",
                                consumed={"memory": f"{int(h.share * 80)}Gi"})]  # fmt: skip
            req = d.request("gpu", "gpu.nvidia.com", capacity={"memory": f"{int(h.share * 80)}Gi"})
        else:
            consumed = {"memory": "80Gi"} if _shared(c, h.node) else None
            results = [d.result("gpu", h.node, f"gpu-{g}", consumed=consumed) for g in h.gpus]
            req = d.request("gpu", "gpu.nvidia.com", h.whole)
        if h.via == "extended" and h.whole:
            claim_name = f"{h.name}-extended-resources-{n:05d}"
            objects.append(d.claim(h.namespace, claim_name, [req], results,
                                   reserved_for=[(h.name, uid)], owner_pod=(h.name, uid),
                                   extended=True, node=h.node))  # fmt: skip
            mapping = [{"containerName": "main", "resourceName": "nvidia.com/gpu",
                        "requestName": "gpu"}]  # fmt: skip
            pods.append(d.pod(h.namespace, h.name, node=h.node, uid=uid, labels=labels(h),
                              requests={"nvidia.com/gpu": str(h.whole)},
                              extended_claim=(claim_name, mapping)))  # fmt: skip
            continue
        objects.append(d.template(h.namespace, f"{h.name}-t", [req]))
        objects.append(d.claim(h.namespace, claim_name, [req], results,
                               reserved_for=[(h.name, uid)], owner_pod=(h.name, uid),
                               node=h.node, entry="dev"))  # fmt: skip
        pods.append(d.pod(h.namespace, h.name, node=h.node, uid=uid, labels=labels(h),
                          claims=[("dev", None, f"{h.name}-t")],
                          generated={"dev": claim_name}))  # fmt: skip
    object_set = objects_from_documents([("dra", d.kube_list(objects))])
    return d.kube_list(nodes), d.kube_list(pods), object_set


def _shared(c: Cluster, node: str) -> bool:
    return any(n[0] == node and n[3] for n in c.nodes)


def figures(nodes: Any, pods: Any, objects: Any, indices: Any) -> dict[str, Any]:
    cfg = AnalyticsSettings()
    node_infos, pod_infos, known = kubectl_records(nodes, pods, objects=objects)
    known = {**known, **(indices or {})}
    state = state_from_records(node_infos, pod_infos, known)
    out: dict[str, Any] = {
        "fragmentation": analyze_fragmentation(state, at=AT, settings=cfg).summary,
        "consolidation": analyze_consolidation(
            state, pod_infos, at=AT, settings=cfg, gpu_indices=known
        ).summary,
    }
    with tempfile.TemporaryDirectory() as tmp:
        with Store.open(Path(tmp) / "q.duckdb") as store:
            quotas = [QuotaInfo(project=p, guaranteed_gpus=4.0, source="kueue") for p in PROJECTS]
            store.record_inventory(AT, nodes=node_infos, pods=pod_infos, quotas=quotas)
            out["quota"] = run_quota(store.cursor(), AT, cfg).summary
        if any(p.gpus > 0 for p in pod_infos) and any(n.allocatable_gpus for n in node_infos):
            (Path(tmp) / "nodes.json").write_text(json.dumps(nodes))
            (Path(tmp) / "pods.json").write_text(json.dumps(pods))
            work = read_workload(Path(tmp) / "nodes.json", Path(tmp) / "pods.json", Settings(),
                                 objects=objects)  # fmt: skip
            out["whatif"] = [
                (r.policy, r.capacity_gpus, r.allocated_gpus, r.jobs_started, r.fgd_ratio,
                 r.queued_gpu_hours, r.headroom)
                for r in run_policies(work, ["bestfit", "fgd"])
            ]  # fmt: skip
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10**6))
def test_device_plugin_and_dra_give_identical_figures(seed: int) -> None:
    """The same cluster, written twice: every figure equal."""
    c = build(seed)
    dp_nodes, dp_pods, indices = device_plugin(c)
    dra_nodes, dra_pods, objects = dra(c)
    plain = figures(dp_nodes, dp_pods, None, indices)
    via_dra = figures(dra_nodes, dra_pods, objects, None)
    assert via_dra["fragmentation"] == plain["fragmentation"]
    assert via_dra["quota"] == plain["quota"]
    assert via_dra["consolidation"] == plain["consolidation"]
    assert via_dra.get("whatif") == plain.get("whatif")


def test_the_two_writings_differ_where_it_matters() -> None:
    """Guard against a vacuous comparison: the DRA writing has no GPU in any node's
    allocatable, so without its objects it sees no GPU, and with them it sees them all."""
    c = Cluster([("n0", 4, PRODUCTS[0], True, False)],
                [Holder("alpha", "p", "n0", share=0.5, gpus=[2]),
                 Holder("beta", "q", "n0", whole=2, gpus=[0, 3], via="extended")])  # fmt: skip
    dra_nodes, dra_pods, objects = dra(c)
    blind = figures(dra_nodes, dra_pods, None, None)["fragmentation"]
    assert blind["total_gpus"] == 0
    seen = figures(dra_nodes, dra_pods, objects, None)["fragmentation"]
    assert (seen["total_gpus"], seen["free_gpus"], seen["whole_free_gpus"]) == (4, 1.5, 1)
    assert seen["node_free_gpus"] == {"n0": 1.5}
