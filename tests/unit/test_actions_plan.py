"""The pure parts of actions: policy parsing, and the warn -> wait -> act walk of plan_idle."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from actions.plan import idle_key, plan_idle
from actions.policy import parse_policies
from collector.inventory_records import PodInfo
from gpuscope.errors import ConfigError
from gpuscope.records import Finding, WorkloadKind

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
