"""The pure parts of actions: policy parsing, and the warn -> wait -> act walk of plan_idle."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuscope.actions.plan import idle_key, plan_idle
from gpuscope.actions.policy import parse_policies
from gpuscope.collector.cluster.inventory_records import PodInfo
from gpuscope.core.errors import ConfigError
from gpuscope.core.records import Finding, WorkloadKind

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def pod(
    name: str, kind: WorkloadKind = WorkloadKind.INTERACTIVE, ns: str = "ml", **kw: object
) -> PodInfo:
    return PodInfo(ns, name, f"uid-{name}", "node-a", "Running", None, kind=kind, **kw)  # type: ignore[arg-type]


def idle(name: str, minutes: float = 90, ns: str = "ml") -> Finding:
    subject = {"namespace": ns, "pod": name, "container": "main"}
    return Finding(
        f"f-{name}",
        "idle_session",
        "warning",
        subject,
        NOW,
        NOW,
        {"idle_minutes": minutes, "gpus_held": 2, "threshold": 0.05},
        None,
    )


def policy(**kw: object):  # type: ignore[no-untyped-def]
    return parse_policies(
        {
            "policies": [
                {"name": "p", "type": "idle", "warning_minutes": 30, "action": "delete", **kw}
            ]
        }
    )[0]


def test_policies_default_to_dry_run_and_reject_bad_input_in_one_line() -> None:
    assert policy().dry_run is True
    with pytest.raises(ConfigError, match=r"policies\[p\]\.action"):
        policy(action="explode")
    with pytest.raises(ConfigError, match="time_limit policy needs max_session_age_hours"):
        parse_policies({"policies": [{"name": "t", "type": "time_limit"}]})
    with pytest.raises(ConfigError, match="unique"):
        parse_policies({"policies": [{"name": "a", "type": "idle"}, {"name": "a", "type": "idle"}]})


def test_first_sight_warns_with_the_due_time_then_acts_once_due() -> None:
    p, pods = policy(), {"ml/nb": pod("nb")}
    [warn] = plan_idle(p, [idle("nb")], pods, {}, NOW)
    assert (warn.action, warn.due_at) == ("warn", NOW + timedelta(minutes=30))
    state = {idle_key(p, pods["ml/nb"]): {"kind": "warning", "due_at": warn.due_at}}
    assert plan_idle(p, [idle("nb")], pods, state, NOW + timedelta(minutes=29)) == []
    [act] = plan_idle(p, [idle("nb")], pods, state, NOW + timedelta(minutes=30))
    assert act.action == "delete" and act.gpu_hours_freed == pytest.approx(3.0)  # 2 GPUs x 1.5 h
    done = {idle_key(p, pods["ml/nb"]): {"kind": "done", "due_at": None}}
    assert plan_idle(p, [idle("nb")], pods, done, NOW + timedelta(hours=1)) == []


def test_a_warned_session_no_longer_idle_is_cleared() -> None:
    p, pods = policy(), {"ml/nb": pod("nb")}
    state = {
        idle_key(p, pods["ml/nb"]): {
            "kind": "warning",
            "due_at": NOW,
            "namespace": "ml",
            "pod": "nb",
        }
    }
    [clear] = plan_idle(p, [], pods, state, NOW)
    assert clear.action == "clear-warning" and clear.pod == "nb"


def test_batch_protected_unselected_and_recently_idle_sessions_are_left_alone() -> None:
    pods = {
        "ml/batch": pod("batch", WorkloadKind.BATCH),
        "ml/prot": pod("prot", protected=True),
        "kube-system/sys": pod("sys", ns="kube-system"),
        "ml/short": pod("short"),
        "ml/other": pod("other", labels={"team": "b"}),
    }
    findings = [
        idle("batch"),
        idle("prot"),
        idle("sys", ns="kube-system"),
        idle("short", 10),
        idle("other"),
    ]
    p = policy(idle_minutes=60, match_labels={"team": "a"})
    assert plan_idle(p, findings, pods, {}, NOW, ["kube-system"]) == []
    # a pod re-created under the same name has a new UID: its own, fresh walk
    assert idle_key(p, pod("nb")) != idle_key(p, PodInfo("ml", "nb", "uid-2", "n", "Running", None))


def test_a_warning_that_did_not_land_is_given_again_and_a_given_up_step_gets_no_more() -> None:
    """A ``retry`` row (the annotate was refused) is no warning: the next run warns again,
    it does not act; a ``gave-up`` row gets no step at all, not even a clear."""
    p, pods = policy(), {"ml/nb": pod("nb")}
    key = idle_key(p, pods["ml/nb"])
    retry = {key: {"kind": "retry", "due_at": None, "attempts": 1}}
    [again] = plan_idle(p, [idle("nb")], pods, retry, NOW + timedelta(hours=2))
    assert again.action == "warn"
    gave_up = {key: {"kind": "gave-up", "due_at": None, "namespace": "ml", "pod": "nb"}}
    assert plan_idle(p, [idle("nb")], pods, gave_up, NOW) == []
    assert plan_idle(p, [], pods, gave_up, NOW) == []


def test_terminating_sessions_are_never_selected() -> None:
    p = policy()
    going = {"ml/nb": pod("nb", terminating=True)}
    assert plan_idle(p, [idle("nb")], going, {}, NOW) == []


def test_no_new_consolidation_while_a_reservation_stands_or_in_the_cool_down() -> None:
    from gpuscope.actions.plan import LAST_CONSOLIDATION, consolidation_blocked

    pack = parse_policies(
        {"policies": [{"name": "pack", "type": "consolidation", "cooldown_minutes": 30}]}
    )[0]
    assert consolidation_blocked(pack, {}, NOW) == ""
    assert "node-c reserved" in consolidation_blocked(pack, {}, NOW, reserved={"node-c"})
    row = {"kind": "reserved", "created_at": NOW, "due_at": None}
    assert "node-d reserved" in consolidation_blocked(pack, {"reserve:node-d": row}, NOW)
    last = {LAST_CONSOLIDATION: {"kind": "consolidation", "created_at": NOW, "due_at": None}}
    assert "cool-down" in consolidation_blocked(pack, last, NOW + timedelta(minutes=29))
    assert consolidation_blocked(pack, last, NOW + timedelta(minutes=30)) == ""


@pytest.mark.parametrize(
    "goal",
    ["ml/wants4-0", "a-very-long-namespace-name-indeed/" + "x" * 240, "ns/pod.with.dots", "ns/-x-"],
)
def test_the_reservation_names_its_pod_as_a_valid_label_value(goal: str) -> None:
    import re

    from gpuscope.actions.reservation import taint, taint_value, tolerates, toleration

    value = taint_value(goal)
    assert len(value) <= 63
    assert re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", value)
    assert value != taint_value(goal + "2")  # two pods never share a reservation
    tol = toleration(goal)
    assert (tol["operator"], tol["value"], tol["effect"]) == ("Equal", value, "NoSchedule")
    assert taint(goal)["key"] == tol["key"] == "gpuscope.io/reserved-for"
    assert tolerates({"spec": {"tolerations": [tol]}}, goal)
    assert not tolerates({"spec": {"tolerations": [toleration(goal + "2")]}}, goal)
    # a blanket toleration of the key is not what gpuscope gives, and not counted as it
    assert not tolerates(
        {"spec": {"tolerations": [{"key": tol["key"], "operator": "Exists"}]}}, goal
    )
