"""Issue 21, "What was seen", bullets 1 and 2: Kueue's LocalQueues taken for
ClusterQueues, reclaim promised where Kueue would not reclaim, and queues of another cohort
pooled. Each runs the product end to end: the collector's inventory against the fake API
server into a store (``run_quota``), and ``gpuscope analyze quota`` on kubectl files with
``--objects``. Both failed on the old code: it filed 14 GPUs under a project
``user-queue``, named a victim under Kueue's default ``reclaimWithinCohort: Never``, and
pooled the research cohort's unused 8 GPUs so the job "waited on placement"."""

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
from tests.kueue_objects import documented_setup, kubectl_list

pytestmark = pytest.mark.integration
AT = "2026-11-23T09:00:00Z"


def _store_path(setup: dict[str, list[dict[str, Any]]], tmp_path: Path) -> dict[str, Any]:
    """The collector's way: list the fake API server, record, run the quota detector."""
    api = FakeKubeApi().start()
    try:
        api.store.load(*setup["nodes"], *setup["pods"], *setup["objects"])
        inv = KubeInventory(api.url, retry=RetryPolicy(attempts=1), sleep=lambda _: None)
        try:
            snap = inv.sync_once()
        finally:
            inv.close()
    finally:
        api.stop()
    at = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)
    with Store.open(tmp_path / "q.duckdb") as store:
        store.record_inventory(at, nodes=snap.nodes, pods=snap.pods, quotas=snap.quotas)
        found = run_quota(store.cursor(), at, AnalyticsSettings())
    out = as_json({"quota": found})  # the shape `analyze --json` prints
    return {"summary": out["summary"], "findings": out["findings"]}


def _cli_path(
    setup: dict[str, list[dict[str, Any]]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    """The user's way: kubectl JSON files and ``analyze quota --objects``."""
    files = {}
    for name in ("nodes", "pods"):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(kubectl_list(setup[name])))
    queues = tmp_path / "queues.json"
    queues.write_text(json.dumps(kubectl_list(setup["objects"][:4])))
    local = tmp_path / "localqueues.json"
    local.write_text(json.dumps(kubectl_list(setup["objects"][4:])))
    argv = ["analyze", "quota", "--nodes", str(files["nodes"]), "--pods", str(files["pods"]),
            "--objects", str(queues), "--objects", str(local), "--at", AT, "--json"]  # fmt: skip
    capsys.readouterr()
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    return {"summary": out["summary"], "findings": out["findings"]}


@pytest.fixture(params=["store", "cli"])
def analyse(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Any:
    def run(setup: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
        if request.param == "store":
            return _store_path(setup, tmp_path)
        return _cli_path(setup, tmp_path, capsys)

    return run


def test_localqueues_are_not_taken_for_clusterqueues(analyse: Any) -> None:
    """Bullet 1: the pods' queue-name ``user-queue`` names a LocalQueue in each team's
    namespace; its spec.clusterQueue holds the quota. team-a holds 12 GPUs (4 borrowed),
    team-b 2; nothing is filed under ``user-queue``; team-b's job waits within its
    guarantee, and team-a, the borrower, is told so."""
    out = analyse(documented_setup())
    projects = out["summary"]["projects"]
    assert "user-queue" not in projects
    a, b = projects["team-a"], projects["team-b"]
    assert (a["guaranteed_gpus"], a["used_gpus"], a["over_quota_gpus"]) == (8, 12, 4)
    assert (b["guaranteed_gpus"], b["used_gpus"], b["pending_gpus"]) == (8, 2, 4)
    assert b["waiting_on"] == "quota"
    assert out["summary"]["projects_waiting"] == 1
    [job] = out["summary"]["pending_jobs"]
    assert (job["namespace"], job["job"], job["local_queue"], job["project"]) == (
        "team-b", "Job/finetune", "user-queue", "team-b",
    )  # fmt: skip


def test_no_preemption_stanza_names_no_victim_and_says_which_rule_decides(analyse: Any) -> None:
    """Bullet 2: without a ``preemption`` stanza Kueue's default is reclaimWithinCohort
    Never: team-b's job waits on quota, no job is named, and the finding on the borrower
    says which rule decides."""
    out = analyse(documented_setup())
    [job] = out["summary"]["pending_jobs"]
    assert (job["waits_on"], job["rule"], job["victims"]) == ("quota", "kueue.preemption_never", [])
    assert "reclaimWithinCohort Never" in job["reason"]
    [f] = out["findings"]
    assert f["subject"] == {"project": "team-a"}
    assert (f["severity"], f["recommendation"]) == ("info", None)
    assert f["evidence"]["rules"] == ["kueue.preemption_never"]
    assert "victims" not in f["evidence"]
    assert out["summary"]["total_reclaimable_gpus"] == 0


def test_a_clusterqueue_of_another_cohort_is_not_pooled(analyse: Any) -> None:
    """Bullet 2: research's 8 unused GPUs are in another cohort; team-b's cohort has 16
    nominal and 14 in use, so the 4-GPU job waits on quota, not on placement (18 GPUs
    are free on the nodes)."""
    out = analyse(documented_setup())
    [job] = out["summary"]["pending_jobs"]
    assert job["waits_on"] == "quota" and job["cohort"] == "team-ab"
    assert "cohort team-ab: 16 GPUs of quota, 14 in use" in job["reason"]
    assert out["summary"]["projects"]["research"]["used_gpus"] == 0
    assert not any(f["subject"] == {"project": "research"} for f in out["findings"])


def test_reclaim_within_cohort_any_names_the_job_kueue_would_take(analyse: Any) -> None:
    """The control: with ``reclaimWithinCohort: Any`` Kueue preempts a borrowing queue's
    most recently started job first; team-a's 4-GPU job (started at 08:10) frees enough."""
    out = analyse(documented_setup({"reclaimWithinCohort": "Any"}))
    [job] = out["summary"]["pending_jobs"]
    assert (job["waits_on"], job["rule"]) == ("quota", "kueue.reclaimWithinCohort")
    assert [(v["namespace"], v["job"], v["gpus"]) for v in job["victims"]] == [
        ("team-a", "Job/train-small", 4)
    ]
    [f] = out["findings"]
    assert (f["subject"], f["severity"]) == ({"project": "team-a"}, "warning")
    assert f["recommendation"]["target"]["victims"][0]["job"] == "Job/train-small"


def test_lower_priority_reclaim_spares_equal_priority_jobs(analyse: Any) -> None:
    """``reclaimWithinCohort: LowerPriority``: team-a's jobs have team-b's priority, so
    Kueue takes none of them."""
    out = analyse(documented_setup({"reclaimWithinCohort": "LowerPriority"}))
    [job] = out["summary"]["pending_jobs"]
    assert (job["waits_on"], job["rule"], job["victims"]) == ("quota", "kueue.no_candidates", [])


def test_the_weekly_report_files_gpu_hours_under_the_clusterqueue(tmp_path: Path) -> None:
    """The report's quota table charges the agents' GPU-hours (labelled with the pod's
    queue-name, ``user-queue``) to the ClusterQueue of the pod's LocalQueue, beside that
    ClusterQueue's guarantee; team-a's over-use (12 held, 8 nominal) is the detector's."""
    from datetime import timedelta

    from gpuscope.analytics.report.data import build_report
    from gpuscope.analytics.report.week import Week
    from gpuscope.collector.cluster.inventory_records import node_from_json, pod_from_json
    from gpuscope.collector.cluster.queue_records import quotas_from_objects
    from gpuscope.collector.scraping.batch import Batch
    from gpuscope.core.kube_objects import objects_from_documents
    from gpuscope.core.settings import Settings
    from tests.integration import report_week as rw

    setup = documented_setup()
    quotas = quotas_from_objects(objects_from_documents([("o", kubectl_list(setup["objects"]))]))
    pods = [pod_from_json(p) for p in setup["pods"]]
    start = rw.W10 + timedelta(minutes=10)
    with Store.open(tmp_path / "r.duckdb") as store:
        store.record_inventory(start, nodes=[node_from_json(n) for n in setup["nodes"]],
                               pods=pods, quotas=quotas)  # fmt: skip
        for t in (start, rw.W11 - timedelta(minutes=5)):
            for p in (p for p in pods if p.node):
                labels = [tuple(sorted({"node": p.node, "gpu": str(i), "uuid": f"{p.node}-{i}",
                                        "namespace": p.namespace, "pod": p.name,
                                        "container": "main", "project": p.project}.items()))
                          for i in range(p.gpu_request)]  # fmt: skip
                ms = int(t.replace(tzinfo=UTC).timestamp() * 1000)
                batch = Batch(p.node, ms, [rw.INFO] * len(labels), labels, [1.0] * len(labels), {})
                store.append_cycle([(batch, 0.01)])
        report = build_report(store.cursor(), Week(2025, 10), Settings(), now=rw.NOW)
    table = {r["project"]: r for r in report.tables["quotas"].to_dicts()}
    assert "user-queue" not in table
    assert table["team-a"]["guaranteed_gpus"] == pytest.approx(8, rel=0.01)
    assert table["team-a"]["average_gpus"] == pytest.approx(12, rel=0.01)
    assert table["team-a"]["gpu_hours_over_guarantee"] == pytest.approx(4 * 167.8, rel=0.01)
    assert table["team-b"]["gpu_hours_over_guarantee"] == 0
