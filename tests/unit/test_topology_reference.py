"""An independent brute-force reference for the topology analysis, checked against
``gpuscope analyze topology`` on random kubectl states with topology labels, with and
without a Kueue Topology object.

The reference shares no code with the product: it reads the kubectl JSON itself, and
answers each question by search, one pod at a time: how many jobs of N pods x k GPUs can be
placed together inside one domain (slots), the most pods of k GPUs one domain holds, and
whether a pending pod group fits the cluster but no domain of its level. The definitions it
follows are docs/analytics.md's (Topology section).
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpuscope.cli.main import main

LEAF = "network.topology.nvidia.com/leaf"
RACK = "topology.gpuscope.io/rack"
BLOCK = "cloud.provider.com/topology-block"
KRACK = "cloud.provider.com/topology-rack"
AT = datetime(2026, 1, 1, tzinfo=UTC)


# --- the reference ---------------------------------------------------------------------


def ref_free(nodes: dict[str, Any], pods: dict[str, Any]) -> dict[str, int]:
    """Whole free GPUs per node a new pod could use: 0 on a closed node."""
    used: Counter[str] = Counter()
    for p in pods["items"]:
        node = p["spec"].get("nodeName")
        if node and p["status"]["phase"] in ("Running", "Pending"):
            for c in p["spec"]["containers"]:
                used[node] += int(c["resources"]["requests"].get("nvidia.com/gpu", 0))
    out = {}
    for n in nodes["items"]:
        name = n["metadata"]["name"]
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"]
        )
        closed = not ready or n["spec"].get("unschedulable", False)
        out[name] = 0 if closed else int(n["status"]["allocatable"]["nvidia.com/gpu"]) - used[name]
    return out


def most_pods(free: list[int], k: int) -> int:
    """The most k-GPU pods these nodes hold, by trying every node for each pod."""

    @cache
    def best(state: tuple[int, ...]) -> int:
        options = [
            best(tuple(sorted((*state[:i], state[i] - k, *state[i + 1 :]))))
            for i in range(len(state))
            if state[i] >= k
        ]
        return 1 + max(options) if options else 0

    return best(tuple(sorted(free)))


def most_jobs(free: list[int], pods: int, k: int) -> int:
    """The most jobs of ``pods`` pods x k GPUs placed together: every way of placing one
    job's pods (a node may take several), then the best of what is left."""

    def placements(state: tuple[int, ...], left: int, start: int) -> list[tuple[int, ...]]:
        if left == 0:
            return [state]
        out = []
        for i in range(start, len(state)):
            if state[i] >= k:
                taken = (*state[:i], state[i] - k, *state[i + 1 :])
                out += placements(taken, left - 1, i)
        return out

    @cache
    def best(state: tuple[int, ...]) -> int:
        after = {tuple(sorted(s)) for s in placements(state, pods, 0)}
        return max((1 + best(s) for s in after), default=0)

    return best(tuple(sorted(free)))


def ref_domains(nodes: dict[str, Any], keys: list[str], level: str) -> dict[str, list[str]]:
    """Domain name -> nodes; with ``keys`` (a Kueue Topology), named by the path of values."""
    path = keys[: keys.index(level) + 1] if keys else [level]
    out: dict[str, list[str]] = {}
    for n in nodes["items"]:
        labels = n["metadata"].get("labels", {})
        values = [labels.get(k) for k in path]
        if all(values):
            out.setdefault("/".join(str(v) for v in values), []).append(n["metadata"]["name"])
    return out


def ref_pod_gpus(nodes: dict[str, Any]) -> int:
    counts = Counter(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in nodes["items"])
    return sorted(counts.items(), key=lambda kv: (kv[1], kv[0]))[-1][0]


# --- random states ---------------------------------------------------------------------


@st.composite
def states(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], list[str], dict[str, Any]]:
    kueue = draw(st.booleans())
    n_nodes = draw(st.integers(3, 6))
    nodes: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for i in range(n_nodes):
        gpus = draw(st.sampled_from([4, 8]))
        labels = {"kubernetes.io/hostname": f"n{i}"}
        if kueue:
            labels[BLOCK] = f"b{draw(st.integers(0, 2))}"
            labels[KRACK] = f"r{draw(st.integers(0, 1))}"  # rack names repeat across blocks
        else:
            if draw(st.integers(0, 5)):  # now and then a node without the label
                labels[LEAF] = f"leaf-{draw(st.integers(0, 3))}"
            labels[RACK] = f"rack-{draw(st.integers(0, 3))}"
        ready = draw(st.integers(0, 7)) > 0
        nodes.append(
            {
                "metadata": {"name": f"n{i}", "labels": labels},
                "spec": {"unschedulable": True} if draw(st.integers(0, 7)) == 0 else {},
                "status": {
                    "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64"},
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                },
            }
        )
        left = gpus
        for j in range(draw(st.integers(0, 3))):
            g = draw(st.sampled_from([1, 2, left]))
            if g == 0 or g > left:
                break
            left -= g
            pods.append(_pod(f"p{i}-{j}", f"n{i}", g))
    level = KRACK if kueue else draw(st.sampled_from([LEAF, RACK]))
    n_pods = draw(st.integers(2, 3))
    k = draw(st.sampled_from([2, 4, 4, 8]))
    how = draw(st.sampled_from(["kueue-pod-group", "job"]))
    for j in range(n_pods):
        labels = {}
        ann = {"kueue.x-k8s.io/podset-required-topology": level}
        owner = None
        if how == "kueue-pod-group":
            labels["kueue.x-k8s.io/pod-group-name"] = "train"
            ann["kueue.x-k8s.io/pod-group-total-count"] = str(n_pods)
        else:
            owner = "train"
        pods.append(_pod(f"train-{j}", None, k, labels, ann, owner))
    keys = [BLOCK, KRACK] if kueue else []
    topo = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": "default"},
        "spec": {"levels": [{"nodeLabel": k} for k in keys] + [
            {"nodeLabel": "kubernetes.io/hostname"}
        ]},
    }  # fmt: skip
    return (
        {"kind": "NodeList", "apiVersion": "v1", "items": nodes},
        {"kind": "PodList", "apiVersion": "v1", "items": pods},
        keys,
        topo,
    )


def _pod(
    name: str,
    node: str | None,
    gpus: int,
    labels: dict[str, str] | None = None,
    ann: dict[str, str] | None = None,
    owner: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name, "namespace": "team", "labels": labels or {}, "annotations": ann or {}
    }  # fmt: skip
    if owner:
        meta["ownerReferences"] = [{"kind": "Job", "name": owner, "controller": True}]
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]
    }
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


def run_cli(tmp: Path, nodes: Any, pods: Any, topo: Any | None, capsys: Any) -> dict[str, Any]:
    (tmp / "nodes.json").write_text(json.dumps(nodes))
    (tmp / "pods.json").write_text(json.dumps(pods))
    argv = ["analyze", "topology", "--nodes", str(tmp / "nodes.json"), "--pods",
            str(tmp / "pods.json"), "--json", "--at", "2026-01-01T00:00:00Z"]  # fmt: skip
    if topo is not None:
        (tmp / "topo.json").write_text(json.dumps(topo))
        argv += ["--objects", str(tmp / "topo.json")]
    capsys.readouterr()
    assert main(argv) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(state=states())
def test_reference_agrees_on_slots_largest_job_and_finding(
    state: tuple[dict[str, Any], dict[str, Any], list[str], dict[str, Any]],
    tmp_path: Path,
    capsys: Any,
) -> None:
    nodes, pods, keys, topo = state
    got = run_cli(tmp_path, nodes, pods, topo if keys else None, capsys)
    free = ref_free(nodes, pods)
    pod_gpus = ref_pod_gpus(nodes)
    total = sum(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in nodes["items"])
    sizes = [s for s in (8, 16, 32, 64) if s == 8 or s <= total]
    train = [p for p in pods["items"] if p["metadata"]["name"].startswith("train-")]
    asked = train[0]["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"]
    # the labels some node carries, and the level the pending job asks for (even if none does)
    levels = keys or [k for k in (LEAF, RACK) if ref_domains(nodes, [], k) or k == asked]
    assert sorted(got["summary"]["levels"]) == sorted(levels)
    for level in levels:
        doms = ref_domains(nodes, keys, level)
        out = got["summary"]["levels"][level]
        assert sorted(out["domains"]) == sorted(doms)
        for name, members in doms.items():
            frees = [free[m] for m in members]
            d = out["domains"][name]
            assert d["free_gpus"] == sum(frees)
            for k_text, n_pods in d["largest_job_pods"].items():
                assert n_pods == most_pods(frees, int(k_text)), (level, name, k_text)
        for s in sizes:
            k = min(s, pod_gpus)
            n = -(-s // k)
            want = sum(most_jobs([free[m] for m in ms], n, k) for ms in doms.values())
            assert out["slots"][str(s)] == want, (level, s)
    # the finding: the pending group fits the cluster's free GPUs but no domain of its level
    n, k = (
        len(train),
        int(train[0]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]),
    )
    level = train[0]["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"]
    fits_cluster = sum(free.values()) >= n * k  # the cluster's free GPUs cover it
    fits_domain = any(
        most_pods([free[m] for m in ms], k) >= n for ms in ref_domains(nodes, keys, level).values()
    )
    kinds = [f["kind"] for f in got["findings"]]
    assert kinds == (["topology_fragmentation"] if fits_cluster and not fits_domain else [])


TIER1 = "topology.volcano.sh/tier-1"


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(state=states())
def test_reference_agrees_with_volcano_hypernodes(
    state: tuple[dict[str, Any], dict[str, Any], list[str], dict[str, Any]],
    tmp_path: Path,
    capsys: Any,
) -> None:
    """The same states with the leaves as Volcano HyperNodes (tier 1, labelMatch on the leaf
    label) and the pending job as a Volcano PodGroup that must stay in one tier-1
    HyperNode (networkTopology hard, highestTierAllowed 1): the reference, reading the leaf
    labels, agrees on the tier's domains, slots, largest job and the finding."""
    nodes, pods, _, _ = state
    leaves = sorted({n["metadata"]["labels"][LEAF] for n in nodes["items"]
                     if LEAF in n["metadata"]["labels"]})  # fmt: skip
    assume(leaves)  # no HyperNode at all: the levels fall back to node labels (tested above)
    hypernodes = {"kind": "List", "apiVersion": "v1", "items": [
        {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
         "metadata": {"name": leaf}, "spec": {"tier": 1, "members": [
             {"type": "Node", "selector": {"labelMatch": {"matchLabels": {LEAF: leaf}}}}]}}
        for leaf in leaves
    ] + [{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
          "metadata": {"name": "train", "namespace": "team"},
          "spec": {"minMember": 1, "networkTopology": {"mode": "hard", "highestTierAllowed": 1}}}]}  # fmt: skip
    train = [p for p in pods["items"] if p["metadata"]["name"].startswith("train-")]
    for p in train:  # a Volcano job's pods: the group annotation, no Kueue request
        p["metadata"]["labels"] = {}
        p["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "train"}
        p["metadata"].pop("ownerReferences", None)
    got = run_cli(tmp_path, nodes, pods, hypernodes, capsys)
    free = ref_free(nodes, pods)
    pod_gpus = ref_pod_gpus(nodes)
    total = sum(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in nodes["items"])
    sizes = [s for s in (8, 16, 32, 64) if s == 8 or s <= total]
    doms = ref_domains(nodes, [], LEAF)
    assert sorted(got["summary"]["levels"]) == [TIER1]
    out = got["summary"]["levels"][TIER1]
    assert sorted(out["domains"]) == sorted(doms)
    for name, members in doms.items():
        frees = [free[m] for m in members]
        for k_text, n_pods in out["domains"][name]["largest_job_pods"].items():
            assert n_pods == most_pods(frees, int(k_text))
    for s in sizes:
        k = min(s, pod_gpus)
        want = sum(most_jobs([free[m] for m in ms], -(-s // k), k) for ms in doms.values())
        assert out["slots"][str(s)] == want
    n = len(train)
    k = int(train[0]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
    fits_cluster = sum(free.values()) >= n * k
    fits_domain = any(most_pods([free[m] for m in ms], k) >= n for ms in doms.values())
    kinds = [f["kind"] for f in got["findings"]]
    assert kinds == (["topology_fragmentation"] if fits_cluster and not fits_domain else [])
