"""PodDisruptionBudgets in the collector's inventory, and plans from the database that
honour them (issue 25).

Seen: the inventory did not store PodDisruptionBudgets, so a plan made from the collector's
database (``analyze consolidation --db``, ``act`` without a Kubernetes API) chose a victim
whose budget allows no disruption, which a live plan would have left alone. Here a real
collector service lists a fake API server that serves budgets with the disruption
controller's status; its database then holds them, and plans from it leave the protected pod
in place, or evict it once its budget is gone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscope.actions.runner import run_policies
from gpuscope.analytics.runner import run_on_store
from gpuscope.collector.service import CollectorService
from gpuscope.core.settings import Settings, load_settings
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.test_actions import consolidation_policy, node_obj, pod_obj
from tests.integration.test_actions_pdb import KEEP_SMALL

pytestmark = pytest.mark.integration


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[tuple[FakeKubeApi, CollectorService, Settings]]:
    """A collector over a fake cluster where the only way to start the pending 4-GPU job
    is to evict small-0 from node-c, and a budget (minAvailable 1) protects small-0."""
    api = FakeKubeApi().start()
    api.store.load(
        node_obj("node-c"),
        pod_obj("ml", "big-0", "node-c", 4, kind="batch"),
        pod_obj(
            "ml", "small-0", "node-c", 2, kind="batch", preemptible=True, labels={"app": "small"}
        ),
        pod_obj("ml", "wants4-0", None, 4, kind="training"),
        KEEP_SMALL,
    )
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"collector": {"db": str(tmp_path / "c.duckdb"),
                                                    "kubernetes": api.url}}))  # fmt: skip
    settings = load_settings(config, env={})
    service = CollectorService(settings)
    try:
        yield api, service, settings
    finally:
        service.stop()
        api.stop()


def now() -> datetime:
    return datetime.now(UTC)


def plan(service: CollectorService, settings: Settings) -> dict[str, Any]:
    (analysis,) = run_on_store(
        service.store, now(), settings, ["consolidation"], persist=False
    ).values()
    return analysis.summary


def evicted(summary: dict[str, Any]) -> list[str]:
    return sorted(f"{m['namespace']}/{m['pod']}" for m in summary["moves"])


def test_the_inventory_stores_budgets_with_the_controllers_status(
    collector: tuple[FakeKubeApi, CollectorService, Settings],
) -> None:
    _, service, _ = collector
    service.inventory_cycle()
    rows = service.store._query("SELECT key, record FROM inventory_pdbs WHERE valid_to IS NULL")
    assert [k for k, _ in rows] == ["ml/keep-small"]
    rec = json.loads(rows[0][1])
    assert rec["match_labels"] == {"app": "small"} and rec["min_available"] == "1"
    assert rec["max_unavailable"] is None
    assert (rec["disruptions_allowed"], rec["current_healthy"], rec["desired_healthy"],
            rec["expected_pods"]) == (0, 1, 1, 1)  # fmt: skip


def test_a_plan_from_the_database_leaves_the_protected_pod_in_place(
    collector: tuple[FakeKubeApi, CollectorService, Settings],
) -> None:
    api, service, settings = collector
    service.inventory_cycle()
    summary = plan(service, settings)
    assert "ml/small-0" not in evicted(summary)
    assert [u["goal"] for u in summary["unplaceable"]] == ["ml/wants4-0"], summary["unplaceable"]
    assert "no node has room" in summary["unplaceable"][0]["reason"]
    # act without a Kubernetes API plans from the stored budgets too, and says so
    run = run_policies(service.store, [consolidation_policy()], settings, client=None,
                       execute=False, at=now())  # fmt: skip
    assert not [r for r in run.records if r.kind == "evict"]
    assert any("planned with the 1 the inventory stored" in n for n in run.notes), run.notes
    # the budget deleted: the next inventory ends its version, and the plan evicts small-0
    api.store.delete(api.store.resource("poddisruptionbudgets"), "ml", "keep-small")
    service.inventory_cycle()
    assert service.store._query("SELECT count(*) FROM inventory_pdbs WHERE valid_to IS NULL") == [
        (0,)
    ]
    assert evicted(plan(service, settings)) == ["ml/small-0"]
    run = run_policies(service.store, [consolidation_policy()], settings, client=None,
                       execute=False, at=now())  # fmt: skip
    assert [(r.kind, r.pod) for r in run.records if r.kind == "evict"] == [("evict", "small-0")]


def test_analyze_consolidation_from_a_copy_of_the_database_honours_the_budget(
    collector: tuple[FakeKubeApi, CollectorService, Settings], tmp_path: Path
) -> None:
    """The CLI on the database the collector wrote: the same refusal, through the command."""
    _, service, settings = collector
    service.inventory_cycle()
    service.store.checkpoint()
    copy = tmp_path / "copy.duckdb"
    copy.write_bytes(Path(settings.collector.db).read_bytes())
    proc = subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "analyze", "consolidation", "--db",
         str(copy), "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert "ml/small-0" not in evicted(out)
    assert [u["goal"] for u in out["unplaceable"]] == ["ml/wants4-0"]
    assert out["summary"]["pdb_blocked"] == {
        "ml/small-0": "PodDisruptionBudget ml/keep-small allows no disruption "
        "(needs 1 healthy pods, has 1)"
    }


#: KEEP_SMALL as ``kubectl get pdb -A -o json`` shows it: with the controller's status.
KEEP_SMALL_LISTED: dict[str, Any] = {
    **KEEP_SMALL,
    "metadata": {**KEEP_SMALL["metadata"], "generation": 1},
    "status": {"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 1,
               "desiredHealthy": 1, "expectedPods": 1,
               "conditions": [{"type": "DisruptionAllowed", "status": "False",
                               "observedGeneration": 1, "reason": "InsufficientPods",
                               "lastTransitionTime": "2026-11-25T10:00:00Z", "message": ""}]},
}  # fmt: skip


@pytest.mark.parametrize("with_budget", [True, False])
def test_analyze_consolidation_from_kubectl_files_honours_a_budget_in_objects(
    tmp_path: Path, with_budget: bool
) -> None:
    """``--nodes --pods --objects pdbs.json``: the same budget, from files."""
    nodes = {"kind": "List", "items": [node_obj("node-c")]}
    pods = {"kind": "List", "items": [
        pod_obj("ml", "big-0", "node-c", 4, kind="batch"),
        pod_obj("ml", "small-0", "node-c", 2, kind="batch", preemptible=True,
                labels={"app": "small"}),
        pod_obj("ml", "wants4-0", None, 4, kind="training"),
    ]}  # fmt: skip
    budgets = {"kind": "List", "apiVersion": "v1", "items": [KEEP_SMALL_LISTED]}
    for name, doc in (("nodes", nodes), ("pods", pods), ("pdbs", budgets)):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    objects = ["--objects", str(tmp_path / "pdbs.json")] if with_budget else []
    proc = subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "analyze", "consolidation", "--nodes",
         str(tmp_path / "nodes.json"), "--pods", str(tmp_path / "pods.json"), *objects,
         "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    if with_budget:
        assert evicted(out) == [] and list(out["summary"]["pdb_blocked"]) == ["ml/small-0"]
    else:
        assert evicted(out) == ["ml/small-0"] and out["summary"]["pdb_blocked"] == {}
