"""Issue 37's queue rules end to end: the collector's inventory against the fake API
server into a store (``run_quota``, what ``--db`` reads), and ``gpuscope analyze quota``
on kubectl files with ``--objects``. One cluster holds all four minimal cases (each in
its own queues): a namespaceSelector on a Namespace label, a queue without a GPU
resource next to idle GPUs, LowerOrNewerEqualPriority against a job created earlier but
started later, and a reclaim inside a Cohort's own quota."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuscope.analytics.queueing.quota import run_quota
from gpuscope.analytics.runner import as_json
from gpuscope.cli.main import main
from gpuscope.collector.cluster.inventory import KubeInventory
from gpuscope.collector.cluster.kube_api import RetryPolicy
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import AnalyticsSettings
from tests.fakes.kube_api import FakeKubeApi
from tests.kueue_objects import (
    GPU,
    KUEUE,
    cluster_queue,
    kubectl_list,
    local_queue,
    namespace,
    node,
    pod,
    resource_flavor,
)

pytestmark = pytest.mark.integration
AT = "2026-11-23T12:00:00Z"


def _cohort(name: str, nominal: int, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"resourceGroups": [{"coveredResources": [GPU], "flavors": [
        {"name": "default-flavor", "resources": [{"name": GPU, "nominalQuota": nominal}]}]}]}  # fmt: skip
    if parent:
        spec["parent"] = parent
    return {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def _cluster() -> dict[str, list[dict[str, Any]]]:
    gold = {"matchLabels": {"tier": "gold"}}
    newer = {"withinClusterQueue": "LowerOrNewerEqualPriority"}
    return {
        "nodes": [node(f"gpu-{i}") for i in range(1, 7)],
        "pods": [
            # gold selects team-g only
            pod("team-g", "g-0", 1, None, job="g", minute=5),
            pod("team-x", "x-0", 1, None, job="x", minute=6),
            # etl covers cpu and memory only; its cohort has 8 idle GPUs
            pod("etl", "load-0", 2, None, job="load", minute=7),
            # created 10:00, started 11:30; the pending one created 11:00
            pod("ranked", "old-0", 8, "gpu-1", job="old", minute=120, started=210),
            pod("ranked", "new-0", 4, None, job="new", minute=180),
            # batch borrows all 12 GPUs of the tree; vision's job fits its Cohort's 8
            pod("batch", "big-0", 8, "gpu-2", job="big", minute=0, priority=5),
            pod("batch", "small-0", 4, "gpu-3", job="small", minute=10, priority=5),
            pod("vision", "train-0", 4, None, job="train", minute=20),
        ],
        "objects": [
            resource_flavor(),
            namespace("team-g", {"tier": "gold"}), namespace("team-x"), namespace("etl"),
            namespace("ranked"), namespace("batch"), namespace("vision"),
            cluster_queue("gold", 8, namespace_selector=gold),
            cluster_queue("etl", 0, "shared", gpu_resource=False),
            cluster_queue("gpus", 8, "shared"),
            cluster_queue("ranked", 8, preemption=newer),
            _cohort("root", 0), _cohort("vision-org", 8, "root"),
            cluster_queue("vision", 0, "vision-org", preemption={"reclaimWithinCohort": "Any"}),
            cluster_queue("batch", 4, "root"),
            local_queue("team-g", "gold"), local_queue("team-x", "gold"),
            local_queue("etl", "etl"), local_queue("ranked", "ranked"),
            local_queue("batch", "batch"), local_queue("vision", "vision"),
        ],
    }  # fmt: skip


def _store_path(cluster: dict[str, list[dict[str, Any]]], tmp_path: Path) -> list[Any]:
    api = FakeKubeApi().start()
    try:
        api.store.load(*cluster["nodes"], *cluster["pods"], *cluster["objects"])
        inv = KubeInventory(api.url, retry=RetryPolicy(attempts=1), sleep=lambda _: None)
        try:
            snap = inv.sync_once()
        finally:
            inv.close()
    finally:
        api.stop()
    at = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    with Store.open(tmp_path / "q.duckdb") as store:
        store.record_inventory(at, nodes=snap.nodes, pods=snap.pods, quotas=snap.quotas)
        found = run_quota(store.cursor(), at, AnalyticsSettings())
    return list(as_json({"quota": found})["summary"]["pending_jobs"])


def _cli_path(
    cluster: dict[str, list[dict[str, Any]]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> list[Any]:
    paths = {}
    for name in ("nodes", "pods", "objects"):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(kubectl_list(cluster[name])))
    argv = ["analyze", "quota", "--nodes", str(paths["nodes"]), "--pods", str(paths["pods"]),
            "--objects", str(paths["objects"]), "--at", AT, "--json"]  # fmt: skip
    capsys.readouterr()
    assert main(argv) == 0
    return list(json.loads(capsys.readouterr().out)["summary"]["pending_jobs"])


@pytest.mark.parametrize("path", ["store", "cli"])
def test_issue_37_queue_rules_through_collector_and_files(
    path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _cluster()
    jobs = (
        _store_path(cluster, tmp_path) if path == "store" else _cli_path(cluster, tmp_path, capsys)
    )
    got = {
        j["job"]: (j["waits_on"], j["rule"], [(v["namespace"], v["job"]) for v in j["victims"]])
        for j in jobs
    }
    assert got == {
        "Job/g": ("placement", "kueue.fits_quota", []),
        "Job/x": ("quota", "kueue.namespace_not_selected", []),
        "Job/load": ("quota", "kueue.resource_not_covered", []),
        "Job/new": ("quota", "kueue.no_candidates", []),
        "Job/train": ("quota", "kueue.reclaimWithinCohort", [("batch", "Job/small")]),
    }
