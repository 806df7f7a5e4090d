"""The actions executor against the fake Kubernetes API server over HTTP, with the official
client: idle termination (warn -> wait -> act) and consolidation (the reservation taint,
the toleration, evictions, lifting), refusals, and the dry-run path, which must send no
mutating request but server-side dry runs (asserted on the server's request log). Every
step against every answer is in test_actions_answers.py; what was seen against a real
API server, in test_actions_seen.py.

Histories are built through the real Store (tests/integration/test_idle.py's ``fill``): a
notebook idle from 10:00, a busy one, and an idle batch job, scraped until 11:30 and
analysed from 11:00 on. (Without fresh data a session is *unknown*, not idle, and its
warning is cleared: the executor acts only on sessions seen idle all along.)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscope.actions.kube import ClusterClient
from gpuscope.actions.policy import Policy, parse_policies
from gpuscope.actions.runner import ActRun, run_policies
from gpuscope.collector.cluster.inventory_records import node_from_json, pod_from_json
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.test_idle import END, T0, Gpu, Work, fill

AT = END.replace(tzinfo=UTC)
DATA_END = END + timedelta(minutes=30)
STEP = 60  # seconds between simulated scrapes (the settings say so too)
A0, A1, B0 = Gpu("node-a", 0), Gpu("node-a", 1), Gpu("node-b", 0)
NB_IDLE = Work("ml", "nb-idle-0", "interactive", (A0,))
NB_BUSY = Work("ml", "nb-busy-0", "interactive", (A1,))
TRAIN = Work("ml", "train-0", "batch", (B0,))


def node_obj(name: str, gpus: int = 8) -> dict[str, Any]:
    alloc = {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi"}
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100"}},
        "status": {"allocatable": alloc, "capacity": alloc},
    }


def pod_obj(
    ns: str,
    name: str,
    node: str | None,
    gpus: int = 1,
    *,
    notebook: str = "",
    kind: str = "",
    preemptible: bool = False,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta_labels = dict(labels or {})
    if notebook:
        meta_labels["notebook-name"] = notebook
    if kind:
        meta_labels["gpuscope.io/workload-type"] = kind
    if preemptible:
        meta_labels["gpuscope.io/preemptible"] = "true"
    owner = (
        [{"kind": "StatefulSet", "name": notebook, "apiVersion": "apps/v1", "uid": "ss-1"}]
        if notebook
        else [{"kind": "Job", "name": name, "apiVersion": "batch/v1", "uid": "job-1"}]
    )
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]
    }
    if node:
        spec["nodeName"] = node
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"uid-{ns}-{name}",
            "labels": meta_labels,
            "ownerReferences": owner,
        },
        "spec": spec,
        "status": {
            "phase": "Running" if node else "Pending",
            "startTime": T0.strftime("%Y-%m-%dT%H:%M:%SZ"),
            # a running pod passed its readiness probe (what budgets count as healthy)
            "conditions": [{"type": "Ready", "status": "True" if node else "False"}],
        },
    }


@dataclass
class Cluster:
    api: FakeKubeApi
    store: Store
    db: Path
    tmp: Path
    #: The client's backoff sleeps (never slept: tests do not wait on the clock).
    sleeps: list[float] = field(default_factory=list)

    def record(self, *objs: dict[str, Any]) -> None:
        """Load objects into the API server and the store's inventory (the collector's view)."""
        self.api.store.load(*objs)
        self.sync()

    def sync(self) -> None:
        nodes = [
            node_from_json(o)
            for o in self.api.store.list(self.api.store.resource("nodes"), None, "", "")[0]
        ]
        pods = [
            pod_from_json(o)
            for o in self.api.store.list(self.api.store.resource("pods"), None, "", "")[0]
        ]
        self.store.record_inventory(AT - timedelta(minutes=1), nodes=nodes, pods=pods)

    def run(
        self,
        policies: list[Policy],
        *,
        execute: bool,
        at: datetime = AT,
        notifier: Any = None,
        **actions: Any,
    ) -> ActRun:
        settings = Settings.model_validate(
            {
                "collector": {"kubernetes": self.api.url, "scrape_interval_seconds": STEP},
                "actions": actions,
            }
        )
        # a request the server never answers ends after 2 s, whatever the machine's load
        client = ClusterClient(self.api.url, sleep=self.sleeps.append, request_timeout_seconds=2.0)
        try:
            return run_policies(
                self.store,
                policies,
                settings,
                client=client,
                execute=execute,
                at=at,
                notifier=notifier,
            )
        finally:
            client.close()

    def pod(self, ns: str, name: str) -> dict[str, Any] | None:
        try:
            return self.api.store.get(self.api.store.resource("pods"), ns, name)
        except Exception:
            return None

    def going(self, ns: str, name: str) -> bool:
        """Deleted: gone, or Terminating (a bound pod's delete is graceful)."""
        pod = self.pod(ns, name)
        return pod is None or bool(pod["metadata"].get("deletionTimestamp"))

    def node(self, name: str) -> dict[str, Any]:
        return self.api.store.get(self.api.store.resource("nodes"), None, name)


@pytest.fixture
def cluster(tmp_path: Path, actions_history: Path) -> Iterator[Cluster]:
    """The fake API server's cluster, and a copy of the store history every act test starts
    from (tests/integration/conftest.py builds it once)."""
    db = tmp_path / "act.duckdb"
    shutil.copyfile(actions_history, db)
    store = Store.open(db)
    with FakeKubeApi() as api:
        c = Cluster(api, store, db, tmp_path)
        c.record(
            node_obj("node-a"),
            node_obj("node-b"),
            pod_obj("ml", "nb-idle-0", "node-a", notebook="nb-idle"),
            pod_obj("ml", "nb-busy-0", "node-a", notebook="nb-busy"),
            pod_obj("ml", "train-0", "node-b", kind="batch"),
            {
                "kind": "Notebook",
                "apiVersion": "kubeflow.org/v1",
                "metadata": {"name": "nb-idle", "namespace": "ml"},
            },
        )
        api.requests.clear()
        yield c
        store.close()


def idle_policy(**kw: Any) -> Policy:
    base = {
        "name": "idle-notebooks",
        "type": "idle",
        "warning_minutes": 10,
        "action": "stop-notebook",
        "dry_run": False,
    }
    return parse_policies({"policies": [{**base, **kw}]})[0]


def results(run: ActRun) -> list[tuple[str, str, str]]:
    return [(r.kind, r.pod or r.node, r.result) for r in run.records]


# -- idle termination ---------------------------------------------------------------------------
def test_dry_run_warns_then_would_stop_and_sends_only_server_side_dry_runs(
    cluster: Cluster,
) -> None:
    """A dry run walks the same timeline (warning, then the action once due) with every
    change sent as dryRun=All: the server's log has no mutating request, and nothing changed."""
    policy = idle_policy()
    first = cluster.run([policy], execute=False)
    assert results(first) == [("warn", "nb-idle-0", "would-do")]
    assert all(r.dry_run for r in first.records)
    again = cluster.run([policy], execute=False, at=AT + timedelta(minutes=5))
    assert results(again) == []  # warned already, not due: idempotent
    due = cluster.run([policy], execute=False, at=AT + timedelta(minutes=11))
    assert results(due) == [("stop-notebook", "nb-idle-0", "would-do")]
    assert cluster.api.mutating() == []
    assert any(r.query.get("dryRun") == "All" and r.method == "PATCH" for r in cluster.api.requests)
    notebook = cluster.api.store.get(cluster.api.store.resource("notebooks"), "ml", "nb-idle")
    assert "annotations" not in notebook["metadata"]
    assert "annotations" not in (cluster.pod("ml", "nb-idle-0") or {})["metadata"]


def test_policy_dry_run_true_plans_even_with_execute(cluster: Cluster) -> None:
    run = cluster.run([idle_policy(dry_run=True)], execute=True)
    assert results(run) == [("warn", "nb-idle-0", "would-do")]
    assert cluster.api.mutating() == []
    assert any("dry_run: true" in n for n in run.notes)


def test_execute_warns_waits_checks_again_and_stops_the_notebook_once(cluster: Cluster) -> None:
    policy = idle_policy()
    run = cluster.run([policy], execute=True)
    assert results(run) == [("warn", "nb-idle-0", "done")]
    pod = cluster.pod("ml", "nb-idle-0")
    assert pod is not None and "gpuscope.io/idle-warning" in pod["metadata"]["annotations"]
    events = cluster.api.store.list(cluster.api.store.resource("events"), "ml", "", "")[0]
    assert [e["reason"] for e in events] == ["GpuscopeIdleWarning"]
    assert events[0]["involvedObject"]["uid"] == "uid-ml-nb-idle-0"
    assert results(cluster.run([policy], execute=True, at=AT + timedelta(minutes=5))) == []
    due = cluster.run([policy], execute=True, at=AT + timedelta(minutes=11))
    assert results(due) == [("stop-notebook", "nb-idle-0", "done")]
    notebook = cluster.api.store.get(cluster.api.store.resource("notebooks"), "ml", "nb-idle")
    assert notebook["metadata"]["annotations"]["kubeflow-resource-stopped"].startswith(
        "2026-03-02T11:11"
    )
    # running again does not act again
    assert results(cluster.run([policy], execute=True, at=AT + timedelta(minutes=12))) == []
    audit = cluster.store._query("SELECT kind, result, dry_run FROM actions ORDER BY ts")
    assert [tuple(r) for r in audit] == [("warn", "done", False), ("stop-notebook", "done", False)]


def test_a_session_busy_again_has_its_warning_cleared(cluster: Cluster) -> None:
    policy = idle_policy()
    cluster.run([policy], execute=True)
    # the notebook became busy after 11:30 (its warning fell due at 11:10, but no run came)
    fill(
        cluster.store,
        [A0, A1, B0],
        [NB_IDLE, NB_BUSY, TRAIN],
        lambda g, ts: 0.7 if g != B0 else 0.0,
        start=DATA_END + timedelta(seconds=15),
        end=DATA_END + timedelta(minutes=10),
        step=STEP,
    )
    later = cluster.run(
        [policy], execute=True, at=(DATA_END + timedelta(minutes=10)).replace(tzinfo=UTC)
    )
    assert results(later) == [("clear-warning", "nb-idle-0", "done")]
    pod = cluster.pod("ml", "nb-idle-0")
    assert pod is not None and "gpuscope.io/idle-warning" not in pod["metadata"].get(
        "annotations", {}
    )


def test_delete_action_deletes_the_pod(cluster: Cluster) -> None:
    policy = idle_policy(action="delete", warning_minutes=0)
    assert results(cluster.run([policy], execute=True)) == [("warn", "nb-idle-0", "done")]
    run = cluster.run([policy], execute=True, at=AT + timedelta(seconds=1))
    assert results(run) == [("delete", "nb-idle-0", "done")]
    assert cluster.going("ml", "nb-idle-0")
    assert not cluster.going("ml", "nb-busy-0") and not cluster.going("ml", "train-0")
    assert run.records[0].gpu_hours_freed == pytest.approx(1.0, abs=0.01)  # idle the whole hour


def test_eviction_blocked_by_a_disruption_budget_is_not_now(cluster: Cluster) -> None:
    cluster.api.store.load(
        {
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-nb", "namespace": "ml"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"notebook-name": "nb-idle"}}},
        }
    )
    policy = idle_policy(action="evict", warning_minutes=0)
    cluster.run([policy], execute=True)
    run = cluster.run([policy], execute=True, at=AT + timedelta(seconds=1))
    assert results(run) == [("evict", "nb-idle-0", "blocked")]
    assert "disruption budget" in run.records[0].message
    assert cluster.pod("ml", "nb-idle-0") is not None
    # the budget allows it later: the next run evicts
    cluster.api.store.delete(cluster.api.store.resource("poddisruptionbudgets"), "ml", "keep-nb")
    later = cluster.run([policy], execute=True, at=AT + timedelta(seconds=2))
    assert results(later) == [("evict", "nb-idle-0", "done")]
    assert cluster.going("ml", "nb-idle-0")


def test_a_pod_that_vanished_is_not_found_and_done(cluster: Cluster) -> None:
    policy = idle_policy(action="delete", warning_minutes=0)
    cluster.run([policy], execute=True)
    cluster.api.store.delete(cluster.api.store.resource("pods"), "ml", "nb-idle-0")
    run = cluster.run([policy], execute=True, at=AT + timedelta(seconds=1))
    assert results(run) == [("delete", "nb-idle-0", "not-found")]
    assert results(cluster.run([policy], execute=True, at=AT + timedelta(seconds=2))) == []


def test_a_pod_recreated_under_the_same_name_is_a_conflict_and_survives(cluster: Cluster) -> None:
    policy = idle_policy(action="delete", warning_minutes=0)
    cluster.run([policy], execute=True)
    store = cluster.api.store
    store.delete(store.resource("pods"), "ml", "nb-idle-0")
    fresh = pod_obj("ml", "nb-idle-0", "node-a", notebook="nb-idle")
    fresh["metadata"]["uid"] = "uid-new"
    store.load(fresh)
    run = cluster.run([policy], execute=True, at=AT + timedelta(seconds=1))
    assert results(run) == [("delete", "nb-idle-0", "conflict")]
    assert "another pod now" in run.records[0].message  # seen on the re-read: nothing sent
    assert cluster.api.count("DELETE") == 0
    assert (cluster.pod("ml", "nb-idle-0") or {})["metadata"]["uid"] == "uid-new"


def test_the_uid_precondition_stops_a_delete_racing_a_re_creation(cluster: Cluster) -> None:
    """The re-read saw the planned pod; the name is another pod's by the time the DELETE
    lands: the API server's precondition refuses it (409) and the new pod survives."""
    policy = idle_policy(action="delete", warning_minutes=0)
    cluster.run([policy], execute=True)
    store = cluster.api.store

    def recreate() -> None:
        store.delete(store.resource("pods"), "ml", "nb-idle-0")
        fresh = pod_obj("ml", "nb-idle-0", "node-a", notebook="nb-idle")
        fresh["metadata"]["uid"] = "uid-new"
        store.load(fresh)

    cluster.api.after_next("GET", "/api/v1/namespaces/ml/pods/nb-idle-0", recreate)
    run = cluster.run([policy], execute=True, at=AT + timedelta(seconds=1))
    assert results(run) == [("delete", "nb-idle-0", "conflict")]
    assert "Precondition failed: UID in precondition" in run.records[0].message
    assert run.records[0].status == 409 and run.records[0].sent.startswith("delete pod")
    assert (cluster.pod("ml", "nb-idle-0") or {})["metadata"]["uid"] == "uid-new"


def test_rbac_forbidden_is_reported_clearly_and_stops(cluster: Cluster) -> None:
    cluster.api.deny("delete", "pods")
    policy = idle_policy(action="delete", warning_minutes=0)
    cluster.run([policy], execute=True)
    run = cluster.run([policy], execute=True, at=AT + timedelta(seconds=1))
    assert results(run) == [("delete", "nb-idle-0", "forbidden")]
    assert 'cannot delete resource "pods"' in run.records[0].message
    assert cluster.pod("ml", "nb-idle-0") is not None


def test_kill_switch_makes_an_execute_run_a_dry_run(cluster: Cluster) -> None:
    run = cluster.run([idle_policy()], execute=True, kill_switch=True)
    assert results(run) == [("warn", "nb-idle-0", "would-do")]
    assert cluster.api.mutating() == []


def test_allowlist_and_protected_namespaces_hold_actions_back(cluster: Cluster) -> None:
    run = cluster.run([idle_policy()], execute=True, allowlist_namespaces=["other"])
    assert results(run) == [("warn", "nb-idle-0", "skipped")]
    assert "allowlist" in run.records[0].message
    assert cluster.api.mutating() == []


def test_rate_limit_caps_acts_per_hour(cluster: Cluster) -> None:
    cluster.record(pod_obj("ml", "nb-two-0", "node-d", notebook="nb-two"))
    d0 = Gpu("node-d", 0)
    extra = Work("ml", "nb-two-0", "interactive", (d0,))
    fill(cluster.store, [d0], [extra], lambda g, ts: 0.0, end=DATA_END, step=STEP)
    policy = idle_policy(action="delete", warning_minutes=0)
    cluster.run([policy], execute=True, max_actions_per_hour=1)
    run = cluster.run([policy], execute=True, at=AT + timedelta(seconds=1), max_actions_per_hour=1)
    assert sorted(r.result for r in run.records) == ["done", "skipped"]
    assert any("rate limit" in r.message for r in run.records)


# -- consolidation ------------------------------------------------------------------------------
@pytest.fixture
def packed(cluster: Cluster) -> Cluster:
    """node-c: 4 GPUs held by a non-movable pod, 2 by a preemptible one, 2 free; a 4-GPU
    job pending: evicting the preemptible pod makes room."""
    cluster.record(
        node_obj("node-c"),
        pod_obj("ml", "big-0", "node-c", 4, kind="batch"),
        pod_obj(
            "ml", "small-0", "node-c", 2, kind="batch", preemptible=True, labels={"app": "small"}
        ),
        pod_obj("ml", "wants4-0", None, 4, kind="training"),
    )
    # nodes a and b are full of non-movable pods, so only node-c can be freed
    for node in ("node-a", "node-b"):
        cluster.record(pod_obj("ml", f"fill-{node}", node, 6, kind="batch"))
    cluster.api.requests.clear()
    return cluster


def consolidation_policy(**kw: Any) -> Policy:
    base = {"name": "pack", "type": "consolidation", "dry_run": False, "cordon_minutes": 20}
    return parse_policies({"policies": [{**base, **kw}]})[0]


RESERVED = "gpuscope.io/reserved-for"
TAINT = {"key": RESERVED, "value": "ml.wants4-0", "effect": "NoSchedule"}
TOLERATION = {"key": RESERVED, "operator": "Equal", "value": "ml.wants4-0", "effect": "NoSchedule"}


def taints(cluster: Cluster, node: str) -> list[dict[str, Any]]:
    return list(cluster.node(node).get("spec", {}).get("taints") or [])


def test_consolidation_reserves_tolerates_evicts_and_lifts_once_bound(packed: Cluster) -> None:
    """The freed node is tainted for the one pending pod, which alone gets the matching
    toleration; no cordon; the taint goes once the pod is bound, and the toleration left
    on the pod then matches nothing."""
    policy = consolidation_policy()
    run = packed.run([policy], execute=True)
    assert results(run) == [
        ("reserve", "node-c", "done"),
        ("tolerate", "wants4-0", "done"),
        ("evict", "small-0", "done"),
    ]
    node = packed.node("node-c")
    assert not node["spec"].get("unschedulable")  # no cordon
    assert taints(packed, "node-c") == [TAINT]
    assert node["metadata"]["annotations"]["gpuscope.io/reserved-for"] == "ml/wants4-0"
    assert (packed.pod("ml", "wants4-0") or {})["spec"]["tolerations"] == [TOLERATION]
    assert packed.going("ml", "small-0")
    events = packed.api.store.list(packed.api.store.resource("events"), None, "", "")[0]
    assert {e["reason"] for e in events} >= {"GpuscopeReservedNode", "GpuscopeEvicted"}
    # a second run while the reservation stands starts nothing new
    again = packed.run([policy], execute=True, at=AT + timedelta(minutes=1))
    assert results(again) == [] and any("in flight" in n for n in again.notes)
    # the scheduler binds the job: the next run lifts the taint
    api = packed.api
    api.store.patch(api.store.resource("pods"), "ml", "wants4-0", {"spec": {"nodeName": "node-c"}})
    lifted = packed.run([policy], execute=True, at=AT + timedelta(minutes=2))
    assert ("lift", "node-c", "done") in results(lifted)
    assert taints(packed, "node-c") == []
    assert "gpuscope.io/reserved-for" not in packed.node("node-c")["metadata"].get(
        "annotations", {}
    )
    assert packed.store.action_state(dry_run=False).keys() == {"consolidation:last"}


def test_the_reservation_keeps_the_nodes_other_taints(packed: Cluster) -> None:
    other = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    api = packed.api
    api.store.patch(api.store.resource("nodes"), None, "node-c", {"spec": {"taints": [other]}})
    packed.run([consolidation_policy()], execute=True)
    assert taints(packed, "node-c") == [other, TAINT]
    api.store.delete(api.store.resource("pods"), "ml", "wants4-0")  # the job gave up
    packed.run([consolidation_policy()], execute=True, at=AT + timedelta(minutes=1))
    assert taints(packed, "node-c") == [other]


def test_consolidation_dry_run_changes_nothing_and_leaves_nothing_in_flight(
    packed: Cluster,
) -> None:
    """A dry run sends only server-side dry runs, and records no reservation or cool-down:
    the demo's printed `act` (a later dry run) plans the consolidation again."""
    run = packed.run([consolidation_policy()], execute=False)
    assert [r.kind for r in run.records] == ["reserve", "tolerate", "evict"]
    assert {r.result for r in run.records} == {"would-do"}
    assert packed.api.mutating() == []
    assert not packed.going("ml", "small-0")
    assert packed.store.action_state(dry_run=True) == {}
    again = packed.run([consolidation_policy()], execute=False, at=AT + timedelta(seconds=1))
    assert [r.kind for r in again.records] == ["reserve", "tolerate", "evict"]
    assert not any("in flight" in n for n in again.notes)


def test_consolidation_blocked_by_a_budget_lifts_its_reservation(packed: Cluster) -> None:
    """The budget appears between the plan (which read the budgets) and the eviction: the
    Eviction API's 429 abandons the plan and lifts the reservation."""
    budget = {
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-small", "namespace": "ml"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "small"}}},
    }
    packed.api.after_next(
        "GET", "/apis/policy/v1/poddisruptionbudgets", lambda: packed.api.store.load(budget)
    )
    run = packed.run([consolidation_policy()], execute=True)
    assert [r[0] + ":" + r[2] for r in results(run)] == [
        "reserve:done",
        "tolerate:done",
        "evict:blocked",
        "lift:done",
    ]
    blocked = run.records[2]
    assert blocked.status == 429 and "needs 1 healthy pods and has 1 currently" in blocked.message
    assert taints(packed, "node-c") == []
    assert not packed.going("ml", "small-0")
    # the toleration stays on the pod (Kubernetes forbids removing one) and matches nothing
    assert (packed.pod("ml", "wants4-0") or {})["spec"]["tolerations"] == [TOLERATION]
    assert packed.store.action_state(dry_run=False).keys() == {"consolidation:last"}


def test_per_node_limit_leaves_a_node_needing_more_evictions_alone(packed: Cluster) -> None:
    run = packed.run([consolidation_policy(max_evictions_per_node=0)], execute=True)
    assert results(run) == []
    assert any("max_evictions_per_node" in n for n in run.notes)
    assert packed.api.mutating() == []


def plant_reservation(
    cluster: Cluster, until: datetime, *, state: bool, freed: bool = True
) -> None:
    """A reservation standing: the taint with its annotations, and the state row (unless
    ``state`` is false: a run that died right after its reserve), marked ``freed`` once
    its run's evictions all landed (unless ``freed`` is false: a run that died on the way)."""
    api = cluster.api
    api.store.patch(
        api.store.resource("nodes"),
        None,
        "node-c",
        {
            "spec": {"taints": [TAINT]},
            "metadata": {
                "annotations": {
                    "gpuscope.io/reserved-for": "ml/wants4-0",
                    "gpuscope.io/reserved-until": until.isoformat(),
                }
            },
        },
    )
    if state:
        cluster.store.save_action_state(
            [
                {
                    "key": "reserve:node-c",
                    "dry_run": False,
                    "kind": "reserved",
                    "due_at": until,
                    "policy": "pack",
                    "node": "node-c",
                    "goal": "ml/wants4-0",
                    "uid": "uid-ml-wants4-0",
                    "freed": freed,
                }
            ],
            AT,
        )


def test_a_reservation_is_lifted_after_its_deadline(packed: Cluster) -> None:
    """A freed node whose job was never bound: the taint goes once the deadline passes.
    (A reservation a crash left is lifted at once: test_actions_recovery.py.)"""
    policy = consolidation_policy()
    plant_reservation(packed, AT + timedelta(minutes=20), state=True)
    early = packed.run([policy], execute=True, at=AT + timedelta(minutes=5))
    assert results(early) == [] and any("in flight" in n for n in early.notes)
    later = packed.run([policy], execute=True, at=AT + timedelta(minutes=21))
    assert results(later)[0] == ("lift", "node-c", "done")
    # the job still waits, and no cool-down was recorded: the same run plans afresh, with a
    # new deadline (a cool-down normally spaces these out)
    until = packed.node("node-c")["metadata"]["annotations"]["gpuscope.io/reserved-until"]
    assert datetime.fromisoformat(until) == AT + timedelta(minutes=41)


def test_the_kill_switch_still_lifts_an_expired_reservation(packed: Cluster) -> None:
    """Lifting is always allowed: the kill switch stops new actions only. (Before, an
    expired cordon of gpuscope's own was never lifted with the kill switch on, and the dry
    run called it "already cordoned by someone else".)"""
    plant_reservation(packed, AT + timedelta(minutes=20), state=True)
    policy = consolidation_policy()
    held = packed.run([policy], execute=True, at=AT + timedelta(minutes=5), kill_switch=True)
    assert not any("someone else" in r.message for r in held.records)
    assert any("in flight" in n for n in held.notes)
    run = packed.run([policy], execute=True, at=AT + timedelta(minutes=21), kill_switch=True)
    lift = next(r for r in run.records if r.kind == "lift")
    assert (lift.result, lift.dry_run) == ("done", False)
    assert TAINT not in taints(packed, "node-c")
    # with the reservation gone, the kill switch makes the new plan a dry run
    assert {r.dry_run for r in run.records if r.kind != "lift"} <= {True}


def test_a_node_cordoned_by_someone_else_is_left_alone(packed: Cluster) -> None:
    api = packed.api
    api.store.patch(api.store.resource("nodes"), None, "node-c", {"spec": {"unschedulable": True}})
    run = packed.run([consolidation_policy()], execute=True)
    assert results(run) == [("reserve", "node-c", "skipped")]
    assert "not by gpuscope" in run.records[0].message
    assert packed.api.mutating() == []


def test_a_cordon_left_by_an_earlier_version_is_lifted(packed: Cluster) -> None:
    api = packed.api
    api.store.patch(
        api.store.resource("nodes"),
        None,
        "node-c",
        {
            "spec": {"unschedulable": True},
            "metadata": {"annotations": {"gpuscope.io/cordoned-for": "ml/wants4-0"}},
        },
    )
    packed.store.save_action_state(
        [{"key": "cordon:node-c", "dry_run": False, "kind": "cordon", "due_at": AT,
          "policy": "pack", "node": "node-c", "goal": "ml/wants4-0"}],
        AT,
    )  # fmt: skip
    run = packed.run([consolidation_policy()], execute=True)
    assert results(run)[0] == ("uncordon", "node-c", "done")
    assert not packed.node("node-c")["spec"].get("unschedulable")


# -- the CLI ------------------------------------------------------------------------------------
def act_cli(
    cluster: Cluster,
    *args: str,
    policy: dict[str, Any],
    config: dict[str, Any],
    at: datetime | None = AT,
) -> subprocess.CompletedProcess[str]:
    pfile = cluster.tmp / "policies.yaml"
    pfile.write_text(yaml.safe_dump({"policies": [policy]}))
    cfile = cluster.tmp / "config.yaml"
    cfile.write_text(yaml.safe_dump(config))
    cluster.store.close()
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscope.cli.main",
            "act",
            "--db",
            str(cluster.db),
            "--policy",
            str(pfile),
            "--config",
            str(cfile),
            *(["--at", at.isoformat()] if at is not None else []),
            "--log-level",
            "WARNING",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_act_is_a_dry_run_by_default_and_prints_json(cluster: Cluster) -> None:
    policy = {"name": "idle-notebooks", "type": "idle", "action": "delete", "dry_run": False}
    proc = act_cli(
        cluster,
        "--json",
        policy=policy,
        config={"collector": {"kubernetes": cluster.api.url, "scrape_interval_seconds": STEP}},
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["dry_run"] is True
    assert [(a["kind"], a["pod"], a["result"]) for a in out["actions"]] == [
        ("warn", "nb-idle-0", "would-do")
    ]
    assert cluster.api.mutating() == []


def test_cli_act_on_old_data_plans_where_the_data_ends_and_will_not_execute(
    cluster: Cluster,
) -> None:
    """Regression (issue 12, stale data presented as current): without --at, act judged a
    database whose data had ended long ago as of now: no idle notebook was left to see
    (its samples were out of every window) and the last inventory was planned on as if
    current, with no word about the data's age. A dry run now plans as of the newest data
    and says so in one line; --execute refuses, in one line, to change the cluster on it."""
    policy = {"name": "idle-notebooks", "type": "idle", "action": "delete", "dry_run": False}
    config = {"collector": {"kubernetes": cluster.api.url, "scrape_interval_seconds": STEP}}
    proc = act_cli(cluster, "--json", policy=policy, config=config, at=None)
    assert proc.returncode == 0, proc.stderr
    [note] = proc.stderr.strip().splitlines()
    assert note.startswith("gpuscope act: the newest data is from") and "--at" in note
    out = json.loads(proc.stdout)
    assert [(a["kind"], a["pod"], a["result"]) for a in out["actions"]] == [
        ("warn", "nb-idle-0", "would-do")
    ]
    before = cluster.db.read_bytes()
    proc = act_cli(cluster, "--execute", policy=policy, config=config, at=None)
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "newest data" in line and "--at" in line and "Traceback" not in line
    assert cluster.api.mutating() == []
    assert cluster.db.read_bytes() == before


def test_cli_act_bad_policy_is_one_line(cluster: Cluster) -> None:
    policy = {"name": "x", "type": "idle", "action": "explode"}
    proc = act_cli(
        cluster,
        policy=policy,
        config={"collector": {"kubernetes": cluster.api.url, "scrape_interval_seconds": STEP}},
    )
    assert proc.returncode != 0
    assert proc.stderr.count("\n") == 1 and "policies[x].action" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_execute_without_a_cluster_is_refused(cluster: Cluster) -> None:
    policy = {"name": "idle-notebooks", "type": "idle"}
    proc = act_cli(
        cluster, "--execute", policy=policy, config={"collector": {"kubernetes": "none"}}
    )
    assert proc.returncode != 0 and "needs a Kubernetes API" in proc.stderr


# -- the culler arbiter -------------------------------------------------------------------------
def test_arbiter_says_whose_gpu_is_idle_and_for_how_long(cluster: Cluster) -> None:
    """After the scheduled analytics (findings stored), the arbiter answers per pod: the
    idle notebook's GPU idle since 10:00, the busy one's not, an unknown pod holds none."""
    from fastapi.testclient import TestClient

    from gpuscope.analytics.detectors.idle import run_idle
    from gpuscope.collector.gauges.metrics import CollectorMetrics
    from gpuscope.collector.http_api.api import ApiState, create_app
    from gpuscope.collector.scraping.targets import TargetRegistry

    settings = Settings()
    idle = run_idle(
        cluster.store, AT, settings.analytics, settings.workloads, scrape_interval_s=STEP
    )
    cluster.store.record_findings(idle.findings, AT, kinds=idle.kinds)
    now = AT + timedelta(minutes=1)
    state = ApiState(
        store=cluster.store,
        targets=TargetRegistry([]),
        metrics=CollectorMetrics(),
        clock=now.timestamp,
    )
    client = TestClient(create_app(state))
    answer = client.get(
        "/api/v1/arbiter/idle", params={"namespace": "ml", "pod": "nb-idle-0"}
    ).json()
    assert answer["holds_gpu"] and answer["gpu_idle"] and not answer["stale"]
    assert answer["idle_seconds"] == pytest.approx(61 * 60, abs=60)
    busy = client.get("/api/v1/arbiter/idle", params={"namespace": "ml", "pod": "nb-busy-0"}).json()
    assert busy["holds_gpu"] and not busy["gpu_idle"] and busy["idle_seconds"] == 0
    none = client.get("/api/v1/arbiter/idle", params={"namespace": "ml", "pod": "nope"}).json()
    assert not none["holds_gpu"] and not none["gpu_idle"]
    late = ApiState(
        store=cluster.store,
        targets=TargetRegistry([]),
        metrics=CollectorMetrics(),
        clock=(AT + timedelta(hours=2)).timestamp,
    )
    stale = (
        TestClient(create_app(late))
        .get("/api/v1/arbiter/idle", params={"namespace": "ml", "pod": "nb-idle-0"})
        .json()
    )
    assert stale["stale"]
    assert client.get("/api/v1/arbiter/idle", params={"namespace": "ml"}).status_code == 422


# -- RBAC ---------------------------------------------------------------------------------------
REPO = Path(__file__).resolve().parents[2]
VERBS = {"POST": "create", "PATCH": "patch", "DELETE": "delete", "PUT": "update"}


def granted(
    manifest: str = "actions-rbac.yaml", name: str = "gpuscope-actions"
) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) a shipped ClusterRole grants (the actions one unless
    told)."""
    docs = yaml.safe_load_all((REPO / "deploy/collector" / manifest).read_text())
    role = next(
        d for d in docs if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == name
    )
    return {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def used(api: FakeKubeApi) -> set[tuple[str, str, str]]:
    out = set()
    for req in api.requests:
        parts = [p for p in req.path.split("/") if p]
        group = "" if parts[0] == "api" else parts[1]
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        if rest[0] == "namespaces":
            rest = rest[2:]
        resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
        verb = VERBS.get(req.method) or ("get" if len(rest) > 1 else "list")
        out.add((group, resource, verb))
    return out


def test_the_actions_role_grants_every_request_an_executed_run_makes_and_no_more(
    packed: Cluster,
) -> None:
    packed.run([consolidation_policy()], execute=True)
    packed.run([idle_policy(action="stop-notebook", warning_minutes=0)], execute=True)
    packed.run(
        [idle_policy(action="stop-notebook", warning_minutes=0)],
        execute=True,
        at=AT + timedelta(seconds=1),
    )
    packed.run(
        [idle_policy(name="del", action="delete", warning_minutes=0)],
        execute=True,
        at=AT + timedelta(seconds=2),
    )
    packed.run(
        [idle_policy(name="del", action="delete", warning_minutes=0)],
        execute=True,
        at=AT + timedelta(seconds=3),
    )
    # the job is bound: the reservation is lifted
    api = packed.api
    api.store.patch(api.store.resource("pods"), "ml", "wants4-0", {"spec": {"nodeName": "node-c"}})
    packed.run([consolidation_policy()], execute=True, at=AT + timedelta(seconds=4))
    needed = used(packed.api)
    assert {
        ("", "pods", "get"),
        ("", "pods", "patch"),
        ("", "pods", "delete"),
        ("", "pods/eviction", "create"),
        ("", "nodes", "get"),
        ("", "nodes", "list"),
        ("", "nodes", "patch"),
        ("kubeflow.org", "notebooks", "get"),
        ("kubeflow.org", "notebooks", "patch"),
        ("", "events", "create"),
    } <= needed
    # reads the collector's read-only role grants (the PodDisruptionBudgets the plan
    # avoids) are not the actions role's
    read = granted("collector.yaml", "gpuscope-collector-read")
    assert ("policy", "poddisruptionbudgets", "list") in needed & read
    roles = granted()
    needed -= read - roles
    assert needed == roles, (needed - roles, roles - needed)  # all it needs, nothing more
    assert not any("*" in (g + r + v) for g, r, v in roles)
    assert not {v for _, _, v in roles} & {
        "update",
        "deletecollection",
        "escalate",
        "bind",
        "impersonate",
    }
    assert not {r for _, r, _ in roles} & {"secrets", "configmaps", "pods/exec"}
