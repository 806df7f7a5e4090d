"""What was seen against a real kube-apiserver (issue 15), each as a test: after a refusal,
on a stale inventory, and in what the audit and ``gpuscope act`` report. Through the
official client over HTTP to the fake API server, which answers as the real one does.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from gpuscope.collector.cluster.inventory_records import pod_from_json
from tests.integration.test_actions import (  # noqa: F401  (fixtures)
    AT,
    STEP,
    TAINT,
    Cluster,
    act_cli,
    cluster,
    consolidation_policy,
    idle_policy,
    packed,
    results,
    taints,
)

POD = "/api/v1/namespaces/ml/pods/nb-idle-0"


def test_a_refused_warning_is_not_a_warning(request: pytest.FixtureRequest) -> None:
    """Seen: the warning state was saved before the annotate and kept after its 403; the
    next run stopped a notebook whose owner was never warned."""
    c: Cluster = request.getfixturevalue("cluster")
    policy = idle_policy(action="stop-notebook", warning_minutes=10)
    c.api.deny("patch", "pods")
    assert results(c.run([policy], execute=True)) == [("warn", "nb-idle-0", "forbidden")]
    c.api.denied.clear()  # the role is bound again
    due = c.run([policy], execute=True, at=AT + timedelta(minutes=11))
    assert results(due) == [("warn", "nb-idle-0", "done")]  # warned now, not stopped
    assert c.api.count("PATCH", "/apis/kubeflow.org/v1/namespaces/ml/notebooks/nb-idle") == 0
    later = c.run([policy], execute=True, at=AT + timedelta(minutes=22))
    assert results(later) == [("stop-notebook", "nb-idle-0", "done")]


def test_a_refused_act_is_tried_again_once_allowed(request: pytest.FixtureRequest) -> None:
    """Seen: the session became `acting` before the call and stayed so after a 403; once
    the role was bound again, that session was never touched again."""
    c: Cluster = request.getfixturevalue("cluster")
    policy = idle_policy(action="delete", warning_minutes=0)
    c.run([policy], execute=True)
    c.api.deny("delete", "pods")
    refused = c.run([policy], execute=True, at=AT + timedelta(seconds=1))
    assert results(refused) == [("delete", "nb-idle-0", "forbidden")]
    c.api.denied.clear()
    again = c.run([policy], execute=True, at=AT + timedelta(seconds=2))
    assert results(again) == [("delete", "nb-idle-0", "done")]
    assert c.going("ml", "nb-idle-0")


def test_act_exits_3_when_steps_are_refused_and_lists_every_outcome(
    request: pytest.FixtureRequest,
) -> None:
    """Seen: `gpuscope act` exited 0 when every step was forbidden."""
    c: Cluster = request.getfixturevalue("cluster")
    c.api.deny("patch", "pods")
    policy = {"name": "idle-notebooks", "type": "idle", "action": "delete", "dry_run": False}
    config = {"collector": {"kubernetes": c.api.url, "scrape_interval_seconds": STEP}}
    proc = act_cli(c, "--execute", "--json", policy=policy, config=config)
    assert proc.returncode == 3, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ok"] is False and out["refused_or_failed"] == 1
    [step] = out["actions"]
    assert (step["kind"], step["result"], step["status"]) == ("warn", "forbidden", 403)
    assert step["sent"].startswith("annotate pod ml/nb-idle-0")
    c.api.denied.clear()
    plain = act_cli(c, "--execute", policy=policy, config=config)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "warn" in plain.stdout and "done" in plain.stdout


def test_act_warns_owners_through_the_alerts_routes(request: pytest.FixtureRequest) -> None:
    """Seen: `gpuscope act` passed no notifier, so owners were never told."""
    from tests.integration.alert_receivers import receiver

    c: Cluster = request.getfixturevalue("cluster")
    with receiver() as owners:
        alerts = c.tmp / "alerts.yaml"
        alerts.write_text(
            "route: {receiver: ops, routes: "
            "[{matchers: ['kind=\"idle_action_warning\"'], receiver: owners}]}\n"
            "receivers:\n"
            "  - {name: ops, type: webhook, url: http://127.0.0.1:9/never}\n"
            f"  - {{name: owners, type: webhook, url: {owners.url}}}\n"
        )
        policy = {"name": "idle-notebooks", "type": "idle", "action": "delete", "dry_run": False}
        config = {
            "collector": {"kubernetes": c.api.url, "scrape_interval_seconds": STEP},
            "alerts": {"config_file": str(alerts)},
        }
        proc = act_cli(c, "--execute", "--json", policy=policy, config=config)
        assert proc.returncode == 0, proc.stderr
        [body] = owners.bodies()
    [alert] = body["alerts"]
    assert alert["labels"]["pod"] == "nb-idle-0" and alert["labels"]["policy"] == "idle-notebooks"
    [step] = json.loads(proc.stdout)["actions"]
    assert step["message"] == "owner notified"


def test_a_bound_job_is_not_reserved_for_again_from_a_stale_inventory(
    request: pytest.FixtureRequest,
) -> None:
    """Seen: after the pending pod was bound, the same run uncordoned the node and cordoned
    it again, every run, until the collector refreshed the inventory."""
    c: Cluster = request.getfixturevalue("packed")
    policy = consolidation_policy(cooldown_minutes=0)
    c.run([policy], execute=True)
    api = c.api
    api.store.patch(api.store.resource("pods"), "ml", "wants4-0", {"spec": {"nodeName": "node-c"}})
    # the database still lists wants4-0 as pending (no sync)
    run = c.run([policy], execute=True, at=AT + timedelta(minutes=2))
    kinds = [(r.kind, r.result) for r in run.records]
    assert kinds[0] == ("lift", "done")
    assert ("reserve", "done") not in kinds
    assert taints(c, "node-c") == []


def test_a_terminating_victim_is_not_evicted_again(request: pytest.FixtureRequest) -> None:
    """Seen: a pod already Terminating was evicted again, every run; and Terminating pods
    were chosen as victims, because nothing excluded them."""
    c: Cluster = request.getfixturevalue("packed")
    api = c.api
    # the victim is being deleted; the database has not seen it yet
    api.store.mark_terminating(
        api.store.resource("pods"),
        api.store.get(api.store.resource("pods"), "ml", "small-0"),
        30,
        dry_run=False,
    )
    run = c.run([consolidation_policy()], execute=True)
    evict = next(r for r in run.records if r.kind == "evict")
    assert (evict.result, evict.sent) == ("skipped", "")
    assert "Terminating" in evict.message
    assert api.count("POST", "/api/v1/namespaces/ml/pods/small-0/eviction") == 0
    # once the inventory shows it Terminating, it is no candidate at all
    record = pod_from_json(api.store.get(api.store.resource("pods"), "ml", "small-0"))
    assert record.terminating


def test_terminating_pods_are_never_candidates() -> None:
    from datetime import UTC, datetime

    from gpuscope.actions.plan import plan_idle
    from gpuscope.actions.policy import parse_policies
    from gpuscope.analytics.consolidation.plan import goals_from_pending, placement_from_state
    from gpuscope.analytics.placement.allocation import state_from_records
    from gpuscope.collector.cluster.inventory_records import node_from_json
    from gpuscope.core.records import Finding
    from tests.integration.test_actions import node_obj, pod_obj

    now = datetime(2026, 3, 2, 11, 0, tzinfo=UTC)
    gone = {"deletionTimestamp": "2026-03-02T10:59:00Z"}
    nb = pod_obj("ml", "nb-0", "node-a", notebook="nb")
    nb["metadata"].update(gone)
    batch = pod_obj("ml", "b-0", "node-a", 2, kind="batch", preemptible=True)
    batch["metadata"].update(gone)
    waiting = pod_obj("ml", "w-0", None, 4, kind="training")
    waiting["metadata"].update(gone)
    pods = [pod_from_json(p) for p in (nb, batch, waiting)]
    assert all(p.terminating for p in pods)
    policy = parse_policies({"policies": [{"name": "p", "type": "idle", "warning_minutes": 0}]})[0]
    finding = Finding(
        "f", "idle_session", "warning", {"namespace": "ml", "pod": "nb-0"}, now, now,
        {"idle_minutes": 90, "gpus_held": 1}, None,
    )  # fmt: skip
    assert plan_idle(policy, [finding], {"ml/nb-0": pods[0]}, {}, now) == []
    state = state_from_records([node_from_json(node_obj("node-a"))], pods)
    placed = placement_from_state(state, pods, at=now)
    assert [(p.pod, p.movable, p.reason_fixed) for p in placed if p.pod == "b-0"] == [
        ("b-0", False, "terminating")
    ]
    assert goals_from_pending(pods) == []


def test_every_change_names_the_object_it_was_planned_against(
    request: pytest.FixtureRequest,
) -> None:
    """Seen: the warning annotation, the annotate action and the notebook stop went by
    name only, so they hit objects re-created under the same name. Every PATCH now
    carries metadata.uid and metadata.resourceVersion; delete and evict a UID
    precondition."""
    c: Cluster = request.getfixturevalue("packed")
    c.run([consolidation_policy()], execute=True)
    for action in ("stop-notebook", "annotate", "delete"):
        policy = idle_policy(name=action, action=action, warning_minutes=0)
        c.run([policy], execute=True, at=AT + timedelta(seconds=1))
        c.run([policy], execute=True, at=AT + timedelta(seconds=2))
    patches = [r for r in c.api.requests if r.method == "PATCH"]
    assert {r.path.split("/")[-2] for r in patches} >= {"pods", "nodes", "notebooks"}
    for req in patches:
        meta = req.json()["metadata"]
        assert meta.get("uid") and meta.get("resourceVersion"), req.path
    for req in c.api.requests:
        if req.method == "DELETE" or req.path.endswith("/eviction"):
            body = req.json()
            pre = (body.get("deleteOptions") or body).get("preconditions") or {}
            assert pre.get("uid"), req.path


def test_an_annotation_racing_a_re_creation_lands_on_no_pod(
    request: pytest.FixtureRequest,
) -> None:
    c: Cluster = request.getfixturevalue("cluster")
    store = c.api.store

    def recreate() -> None:
        from tests.integration.test_actions import pod_obj

        store.delete(store.resource("pods"), "ml", "nb-idle-0")
        fresh = pod_obj("ml", "nb-idle-0", "node-a", notebook="nb-idle")
        fresh["metadata"]["uid"] = "uid-new"
        store.load(fresh)

    c.api.after_next("GET", POD, recreate)
    run = c.run([idle_policy()], execute=True)
    assert results(run) == [("warn", "nb-idle-0", "conflict")]
    assert run.records[0].status == 409
    fresh: dict[str, Any] = c.pod("ml", "nb-idle-0") or {}
    assert "annotations" not in fresh["metadata"]


def test_no_done_when_nothing_was_sent(request: pytest.FixtureRequest) -> None:
    """Seen: `uncordon done` when nothing was cordoned (also after the cordon got 403);
    `tolerate done` and an Event when the toleration was already there."""
    c: Cluster = request.getfixturevalue("packed")
    api = c.api
    api.store.patch(
        api.store.resource("pods"),
        "ml",
        "wants4-0",
        {"spec": {"tolerations": [{"key": TAINT["key"], "operator": "Equal",
                                   "value": TAINT["value"], "effect": "NoSchedule"}]}},
    )  # fmt: skip
    run = c.run([consolidation_policy()], execute=True)
    tol = next(r for r in run.records if r.kind == "tolerate")
    assert (tol.result, tol.sent) == ("skipped", "")
    assert api.count("PATCH", "/api/v1/namespaces/ml/pods/wants4-0") == 0
    events = api.store.list(api.store.resource("events"), "ml", "", "")[0]
    assert "GpuscopeToleratesReservation" not in {e["reason"] for e in events}
    # a reserve refused with 403: nothing was reserved, so nothing is "lifted"
    api.store.patch(api.store.resource("nodes"), None, "node-c", {"spec": {"taints": None}})
    c.store.delete_action_state(["reserve:node-c", "consolidation:last"], dry_run=False)
    api.deny("patch", "nodes")
    refused = c.run([consolidation_policy()], execute=True, at=AT + timedelta(minutes=1))
    assert [(r.kind, r.result) for r in refused.records] == [("reserve", "forbidden")]
