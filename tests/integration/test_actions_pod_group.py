"""Issue 37, "`act` cannot carry out a pod group's plan": a pending 2 x 8-GPU pod group that
must stay inside one leaf switch, executed end to end through the fake Kubernetes API server
with the official kubernetes client over HTTP.

leaf-a (g1, g2) holds one preemptible 4-GPU pod per node; leaf-b (h1, h2) one pod per node
that may not move; node-a/node-b (no leaf) have free GPUs but are in no domain. The plan
clears leaf-a: both nodes are reserved for the group (one taint, both members tolerate it),
both small pods evicted; a member bound alone keeps the reservations, the whole group bound
lifts them, and the group then runs inside leaf-a without over-committing a node. A crash at
any step leaves no reservation behind once the collector's next cycle (one scrape interval)
has run.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from gpuscope.actions.kube import ClusterClient
from gpuscope.actions.runner import lift_when_bound, run_policies
from gpuscope.core.settings import Settings
from tests.integration.test_actions import (  # noqa: F401  (fixtures)
    AT,
    STEP,
    Cluster,
    cluster,
    consolidation_policy,
    results,
    taints,
)
from tests.unit.kubectl_topology import LEAF, node, pod

GROUP = "kueue-pod-group:ml/gang"
GROUP_TAINT = {"key": "gpuscope.io/reserved-for", "value": "kueue-pod-group-ml.gang",
               "effect": "NoSchedule"}  # fmt: skip
MEMBERS = ("gang-0", "gang-1")


@pytest.fixture
def gang(cluster: Cluster) -> Cluster:  # noqa: F811
    cluster.record(
        node("g1", "leaf-a"), node("g2", "leaf-a"), node("h1", "leaf-b"), node("h2", "leaf-b"),
        pod("small-g1", 4, node_name="g1", job="small-g1", kind="batch"),
        pod("small-g2", 4, node_name="g2", job="small-g2", kind="batch"),
        pod("keep-h1", 4, node_name="h1", job="keep-h1", kind="inference"),
        pod("keep-h2", 4, node_name="h2", job="keep-h2", kind="inference"),
        *(pod(m, 8, group="gang", group_count=2, required=LEAF) for m in MEMBERS),
    )  # fmt: skip
    cluster.api.requests.clear()
    return cluster


def settings_for(c: Cluster) -> Settings:
    return Settings.model_validate(
        {"collector": {"kubernetes": c.api.url, "scrape_interval_seconds": STEP}}
    )


def bind(c: Cluster, name: str, node_name: str) -> None:
    """The scheduler's bind: only onto a node whose taints the pod tolerates, with room."""
    pod_obj = c.pod("ml", name)
    assert pod_obj is not None
    tols = pod_obj["spec"].get("tolerations") or []
    for t in taints(c, node_name):
        assert any(all(tol.get(k) == t[k] for k in ("key", "value", "effect")) for tol in tols)
    used = sum(
        int(p["spec"]["containers"][0]["resources"]["requests"].get("nvidia.com/gpu", 0))
        for p in c.api.store.list(c.api.store.resource("pods"), None, "", "")[0]
        if p["spec"].get("nodeName") == node_name
    )
    assert used + 8 <= 8, f"{node_name} would be over-committed ({used} GPUs held)"
    c.api.store.patch(c.api.store.resource("pods"), "ml", name, {"spec": {"nodeName": node_name}})


def lift(c: Cluster, at_minutes: float) -> list[tuple[str, str, str]]:
    """The collector's cycle: the inventory synced, then lift_when_bound."""
    c.sync()
    client = ClusterClient(c.api.url, request_timeout_seconds=2.0)
    try:
        recs = lift_when_bound(
            c.store, [consolidation_policy()], settings_for(c), client=client,
            at=AT + timedelta(minutes=at_minutes),
        )  # fmt: skip
    finally:
        client.close()
    return [(r.kind, r.node, r.result) for r in recs]


def test_a_pod_groups_plan_runs_whole_and_binds_the_group_inside_one_leaf(gang: Cluster) -> None:
    run = gang.run([consolidation_policy()], execute=True)
    assert results(run) == [
        ("reserve", "g1", "done"),
        ("reserve", "g2", "done"),
        ("tolerate", "gang-0", "done"),
        ("tolerate", "gang-1", "done"),
        ("evict", "small-g1", "done"),
        ("evict", "small-g2", "done"),
    ], run.notes
    for n in ("g1", "g2"):
        assert taints(gang, n) == [GROUP_TAINT]
        notes = gang.node(n)["metadata"]["annotations"]
        assert notes["gpuscope.io/reserved-for"] == GROUP
        assert notes["gpuscope.io/reserved-members"] == "ml/gang-0,ml/gang-1"
    for n in ("h1", "h2", "node-a", "node-b"):
        assert taints(gang, n) == []
    # the evicted pods' kubelets confirm; the scheduler binds one member: nothing is lifted
    gang.api.store.finish_terminating()
    bind(gang, "gang-0", "g1")
    assert lift(gang, 1) == []
    assert taints(gang, "g2") == [GROUP_TAINT] and taints(gang, "g1") == [GROUP_TAINT]
    # the whole group bound: both reservations go, within the collector's cycle
    bind(gang, "gang-1", "g2")
    assert sorted(lift(gang, 2)) == [("lift", "g1", "done"), ("lift", "g2", "done")]
    assert taints(gang, "g1") == taints(gang, "g2") == []
    assert "gpuscope.io/reserved-members" not in gang.node("g1")["metadata"].get("annotations", {})
    assert gang.store.action_state(dry_run=False).keys() == {"consolidation:last"}


def test_the_pod_groups_plan_is_a_dry_run_by_default(gang: Cluster) -> None:
    run = gang.run([consolidation_policy(dry_run=True)], execute=True)
    assert [r[2] for r in results(run)] == ["would-do"] * 6
    assert gang.api.mutating() == []
    assert all(taints(gang, n) == [] for n in ("g1", "g2"))


def test_a_member_gone_abandons_the_groups_reservations(gang: Cluster) -> None:
    gang.run([consolidation_policy()], execute=True)
    gang.api.store.delete(gang.api.store.resource("pods"), "ml", "gang-1")
    assert sorted(lift(gang, 1)) == [("lift", "g1", "done"), ("lift", "g2", "done")]
    assert taints(gang, "g1") == taints(gang, "g2") == []


def test_a_budget_refusal_lifts_every_reservation_the_group_made(gang: Cluster) -> None:
    """The budget changed after the plan: the Eviction API's 429 abandons the group's plan
    and both nodes' reservations are lifted in the same run."""
    gang.api.store.load(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-g2", "namespace": "ml", "generation": 1},
            "spec": {"selector": {"matchLabels": {"job-name": "small-g2"}}, "minAvailable": 1},
        }
    )

    class LateBudget(ClusterClient):  # the plan read no budget; the eviction meets one
        def list_pdbs(self) -> list[Any]:
            return []

    client = LateBudget(gang.api.url, request_timeout_seconds=2.0)
    try:
        run = run_policies(gang.store, [consolidation_policy()], settings_for(gang),
                           client=client, execute=True, at=AT)  # fmt: skip
    finally:
        client.close()
    assert ("evict", "small-g2", "blocked") in results(run)
    assert {(k, n) for k, n, r in results(run) if k == "lift" and r == "done"} == {
        ("lift", "g1"),
        ("lift", "g2"),
    }
    assert taints(gang, "g1") == taints(gang, "g2") == []


class Crash(BaseException):
    """The process dies (SIGKILL): nothing after this line runs."""


class CrashingClient(ClusterClient):
    """The official client, killed right after its ``at``-th change landed."""

    def __init__(self, url: str, at: int) -> None:
        super().__init__(url, request_timeout_seconds=2.0)
        self.at, self.changes = at, 0

    def _landed(self, out: Any) -> Any:
        self.changes += 1
        if self.changes == self.at:
            raise Crash
        return out

    def patch_node(self, *a: Any, **kw: Any) -> Any:
        return self._landed(super().patch_node(*a, **kw))

    def add_toleration(self, *a: Any, **kw: Any) -> Any:
        return self._landed(super().add_toleration(*a, **kw))

    def evict_pod(self, *a: Any, **kw: Any) -> Any:
        return self._landed(super().evict_pod(*a, **kw))

    def create_event(self, *a: Any, **kw: Any) -> Any:
        return self._landed(super().create_event(*a, **kw))


#: Changes an executed group plan sends: 2 reserves, 2 tolerations, 2 evictions, each with
#: its Event.
CHANGES = 12


@pytest.mark.parametrize("crash_at", range(1, CHANGES + 1))
def test_a_crash_at_any_step_leaves_no_reservation_after_one_collector_cycle(
    gang: Cluster, crash_at: int
) -> None:
    client = CrashingClient(gang.api.url, crash_at)
    try:
        with pytest.raises(Crash):
            run_policies(gang.store, [consolidation_policy()], settings_for(gang),
                         client=client, execute=True, at=AT)  # fmt: skip
    finally:
        client.close()
    lift(gang, STEP / 60)
    assert all(taints(gang, n) == [] for n in ("g1", "g2", "h1", "h2", "node-a", "node-b"))


def test_without_a_crash_the_reservation_waits_for_the_group(gang: Cluster) -> None:
    """The counterpart: the run that finished keeps its reservations past a cycle (the
    group is still pending); only the group's bind or the deadline lifts them."""
    client = CrashingClient(gang.api.url, CHANGES + 1)
    try:
        run_policies(gang.store, [consolidation_policy()], settings_for(gang),
                     client=client, execute=True, at=AT)  # fmt: skip
    finally:
        client.close()
    assert client.changes == CHANGES
    assert lift(gang, STEP / 60) == []
    assert taints(gang, "g1") == taints(gang, "g2") == [GROUP_TAINT]
    assert sorted(lift(gang, 21)) == [("lift", "g1", "done"), ("lift", "g2", "done")]
