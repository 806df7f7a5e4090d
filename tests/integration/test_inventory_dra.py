"""KubeInventory's DRA part against the fake API server over HTTP: resource.k8s.io/v1
objects listed and folded into the snapshot; a cluster without the API, or with only a
beta version, told apart in one log line while nodes, pods and quotas keep working."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuscope.collector.cluster.inventory import KubeInventory
from gpuscope.collector.cluster.kube_api import RetryPolicy
from tests.fakes import dra_objects as d
from tests.fakes.kube_api import FakeKubeApi
from tests.fakes.kube_store import DEFAULT_INSTALLED
from tests.unit.test_dra_schema import check, fixture_objects

pytestmark = pytest.mark.integration

DRA = "resource.k8s.io/v1"


def _objects() -> list[dict[str, Any]]:
    """A device-plugin node (2 GPUs) and a DRA-only node (4 GPUs in a ResourceSlice): a
    pod holds 2 of the DRA GPUs through a template claim."""
    p = d.pod("ml", "train", node="dra-0", claims=[("g", None, "two")],
              generated={"g": "train-g-7x2k9"})  # fmt: skip
    uid = p["metadata"]["uid"]
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}},
        d.node("plain-0", gpus=2, product="NVIDIA H100 80GB HBM3"),
        d.node("dra-0"),
        p,
        *d.nvidia_classes(),
        d.resource_slice("dra-0", [d.gpu_device(i, f"GPU-{i}") for i in range(4)]),
        d.template("ml", "two", [d.request("g", "gpu.nvidia.com", 2)]),
        d.claim("ml", "train-g-7x2k9", [d.request("g", "gpu.nvidia.com", 2)],
                [d.result("g", "dra-0", "gpu-1"), d.result("g", "dra-0", "gpu-2")],
                reserved_for=[("train", uid)], owner_pod=("train", uid), node="dra-0"),
    ]  # fmt: skip


def _serve(installed: frozenset[str] = DEFAULT_INSTALLED) -> FakeKubeApi:
    api = FakeKubeApi(installed).start()
    kinds_served = {
        o["kind"] for o in _objects() if o["apiVersion"] in installed or o["apiVersion"] == "v1"
    }
    api.store.load(*[o for o in _objects() if o["kind"] in kinds_served])
    return api


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    server = _serve()
    yield server
    server.stop()


def _inventory(api: FakeKubeApi) -> KubeInventory:
    return KubeInventory(api.url, sleep=lambda _: None, retry=RetryPolicy(attempts=2))


def test_dra_devices_and_claims_are_in_the_snapshot(api: FakeKubeApi) -> None:
    """The DRA-only node has 4 GPUs (its slice), the pod holds 2 through its claim; the
    device-plugin node is unchanged; the four kinds were listed at resource.k8s.io/v1."""
    inv = _inventory(api)
    try:
        snap = inv.sync_once()
    finally:
        inv.close()
    nodes = {n.name: n for n in snap.nodes}
    assert nodes["dra-0"].allocatable_gpus == 4
    assert nodes["dra-0"].gpu_model == "NVIDIA-H100-80GB-HBM3"
    assert nodes["plain-0"].allocatable_gpus == 2
    (pod,) = snap.pods
    assert pod.gpu_request == 2 and pod.gpus == 2
    for plural in ("resourceslices", "resourceclaims", "resourceclaimtemplates", "deviceclasses"):
        assert api.count("GET", f"/apis/{DRA}/{plural}") == 1, plural


@pytest.mark.parametrize(
    ("installed", "said"),
    [
        (DEFAULT_INSTALLED - {DRA}, "resource.k8s.io is not served"),
        ((DEFAULT_INSTALLED - {DRA}) | {"resource.k8s.io/v1beta2"}, "serves only v1beta2"),
    ],
)
def test_cluster_without_dra_v1_is_told_apart_in_one_line(
    installed: frozenset[str], said: str, caplog: pytest.LogCaptureFixture
) -> None:
    """No resource.k8s.io/v1: one INFO line says which case it is; nodes and pods are
    read as before (the DRA node simply has no GPU); a second sync does not ask again."""
    api = _serve(frozenset(installed))
    inv = _inventory(api)
    try:
        with caplog.at_level(logging.INFO, logger="gpuscope.collector.cluster.inventory_dra"):
            snap = inv.sync_once()
            inv.sync_once()
    finally:
        inv.close()
        api.stop()
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("inventory_dra")]
    assert len(lines) == 1 and said in lines[0], lines
    assert {n.name: n.allocatable_gpus for n in snap.nodes} == {"plain-0": 2, "dra-0": 0}
    assert api.count("GET", f"/apis/{DRA}/resourceslices") == 0
    asked = [r for r in api.requests if r.path.rstrip("/") == "/apis/resource.k8s.io"]
    assert len(asked) == 1


def test_dra_refused_keeps_the_rest_working(
    api: FakeKubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    """RBAC without the DRA grant: the slices' watch and list are refused (403); the sync
    still gives nodes and pods, the last good DRA state is kept, and the refusal is logged
    once for the streak."""
    inv = _inventory(api)
    try:
        first = inv.sync_once()
        api.deny("list", "resourceslices")
        api.deny("watch", "resourceslices")
        with caplog.at_level(logging.WARNING, logger="gpuscope.collector.cluster.inventory_dra"):
            second = inv.sync_once()
            third = inv.sync_once()
    finally:
        inv.close()
    assert {n.name: n.allocatable_gpus for n in third.nodes} == {
        n.name: n.allocatable_gpus for n in first.nodes
    }
    assert second.pods and third.pods[0].gpu_request == 2
    refused = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(refused) == 1 and "403" in refused[0], refused


def test_the_fake_api_server_serves_the_types() -> None:
    """What the fake API server answers for resource.k8s.io/v1 lists matches the types
    transcribed in tests/unit/test_dra_schema.py (built-in kinds: list items without kind
    and apiVersion, as the real server sends them)."""
    with FakeKubeApi() as api:
        api.store.load(*[o for o in fixture_objects() if o["kind"] != "Pod"])
        for plural, kind in (("resourceslices", "ResourceSlice"),
                             ("resourceclaims", "ResourceClaim"),
                             ("resourceclaimtemplates", "ResourceClaimTemplate"),
                             ("deviceclasses", "DeviceClass")):  # fmt: skip
            with urllib.request.urlopen(f"{api.url}/apis/{DRA}/{plural}") as resp:
                body = json.load(resp)
            assert body["kind"] == f"{kind}List" and body["apiVersion"] == DRA
            assert body["items"], plural
            for item in body["items"]:
                assert "kind" not in item
                check({"kind": kind, "apiVersion": body["apiVersion"], **item})


def test_analyze_and_whatif_read_a_dra_snapshot_from_objects(tmp_path: Path) -> None:
    """``gpuscope analyze fragmentation|consolidation`` and ``gpuscope whatif`` with
    ``--objects``: the DRA-only node's 4 GPUs count (2 held by the pod's claim); without
    ``--objects`` only the device-plugin node's 2 GPUs do."""
    objs = _objects()
    core = [o for o in objs if o["apiVersion"] == "v1"]
    (tmp_path / "nodes.json").write_text(
        json.dumps(d.kube_list([o for o in core if o["kind"] == "Node"]))
    )
    (tmp_path / "pods.json").write_text(
        json.dumps(d.kube_list([o for o in core if o["kind"] == "Pod"]))
    )
    (tmp_path / "dra.json").write_text(
        json.dumps(d.kube_list([o for o in objs if o["apiVersion"] == DRA]))
    )
    base = ["--nodes", "nodes.json", "--pods", "pods.json", "--json"]

    def run(*args: str) -> dict[str, Any]:
        proc = subprocess.run([sys.executable, "-m", "gpuscope.cli.main", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        out: dict[str, Any] = json.loads(proc.stdout)
        return out

    with_dra = run("analyze", "fragmentation", *base, "--objects", "dra.json")["summary"]
    assert (with_dra["total_gpus"], with_dra["free_gpus"]) == (6, 4)
    assert with_dra["node_free_gpus"] == {"dra-0": 2, "plain-0": 2}
    blind = run("analyze", "fragmentation", *base)["summary"]
    assert (blind["total_gpus"], blind["free_gpus"]) == (2, 2)
    plan = run("analyze", "consolidation", *base, "--objects", "dra.json")
    assert plan["summary"]["held_by_standalone_claims"] == []
    whatif = run("whatif", *base, "--objects", "dra.json", "--policy", "bestfit")
    assert whatif["summary"]["capacity_gpus"] == 6
    assert whatif["policies"]["bestfit"]["unallocated_gpus"] == 4


def test_dra_objects_are_watched_after_the_first_list(api: FakeKubeApi) -> None:
    """The first sync lists each kind once; later syncs watch from the resourceVersion
    seen: a claim released in between (its pod gone, the allocation cleared) frees its GPUs
    in the next snapshot without another list."""
    inv = _inventory(api)
    try:
        first = inv.sync_once()
        res = api.store.resource("resourceclaims")
        claim = api.store.get(res, "ml", "train-g-7x2k9")
        api.store.patch(res, "ml", "train-g-7x2k9", {"status": {"allocation": None,
                                                               "reservedFor": None}})  # fmt: skip
        second = inv.sync_once()
    finally:
        inv.close()
    assert claim["status"]["allocation"]
    assert [p.gpu_request for p in first.pods] == [2]
    assert [p.gpu_request for p in second.pods] == [0]
    lists = [r for r in api.requests if r.path == f"/apis/{DRA}/resourceclaims" and not r.watch]
    watches = [r for r in api.requests if r.path == f"/apis/{DRA}/resourceclaims" and r.watch]
    assert len(lists) == 1 and len(watches) == 1
