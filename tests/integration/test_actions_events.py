"""Refused Events, future times and warnings left behind (issue 25), against the fake API
server.

Seen: with ``events create`` forbidden every step reported ``done``, exit 0, with only a
log warning; ``act --execute --at <future>`` was accepted and wrote the invented time into
the audit, the deadlines and the cool-down; a stale ``idle-warning`` annotation stayed on a
pod after ``gave-up``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.test_actions import (  # noqa: F401  (fixtures)
    AT,
    STEP,
    Cluster,
    act_cli,
    cluster,
    idle_policy,
    results,
)

WARNING = "gpuscope.io/idle-warning"


def test_a_refused_event_is_a_refused_step_of_its_own(request: pytest.FixtureRequest) -> None:
    c: Cluster = request.getfixturevalue("cluster")
    c.api.deny("create", "events")
    run = c.run([idle_policy()], execute=True)
    assert results(run) == [("warn", "nb-idle-0", "done"), ("event", "nb-idle-0", "forbidden")]
    event = run.records[1]
    assert event.status == 403 and "its Event was not recorded" in event.message
    assert event.sent == "create event on pod ml/nb-idle-0"
    assert run.refused == [event] and run.as_json()["ok"] is False
    # the warning itself landed and the timeline goes on
    pod = c.pod("ml", "nb-idle-0") or {}
    assert WARNING in pod["metadata"]["annotations"]
    audit = c.store._query("SELECT kind, result FROM actions ORDER BY kind")
    assert [tuple(r) for r in audit] == [("event", "forbidden"), ("warn", "done")]


def test_cli_act_exits_3_when_events_are_refused(request: pytest.FixtureRequest) -> None:
    c: Cluster = request.getfixturevalue("cluster")
    c.api.deny("create", "events")
    policy = {"name": "idle-notebooks", "type": "idle", "action": "delete", "dry_run": False}
    config = {"collector": {"kubernetes": c.api.url, "scrape_interval_seconds": STEP}}
    proc = act_cli(c, "--execute", "--json", policy=policy, config=config)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert [(a["kind"], a["result"]) for a in out["actions"]] == [
        ("warn", "done"),
        ("event", "forbidden"),
    ]


def test_cli_act_execute_refuses_a_future_at(request: pytest.FixtureRequest) -> None:
    c: Cluster = request.getfixturevalue("cluster")
    policy = {"name": "idle-notebooks", "type": "idle", "action": "delete", "dry_run": False}
    config = {"collector": {"kubernetes": c.api.url, "scrape_interval_seconds": STEP}}
    future = datetime.now(UTC) + timedelta(days=30)
    proc = act_cli(c, "--execute", policy=policy, config=config, at=future)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "in the future" in line and "--execute" in line
    assert c.api.mutating() == []
    # a dry run may plan as of a future time
    dry = act_cli(c, policy=policy, config=config, at=future)
    assert dry.returncode == 0, dry.stderr


def test_giving_up_clears_the_warning(request: pytest.FixtureRequest) -> None:
    c: Cluster = request.getfixturevalue("cluster")
    policy = idle_policy(action="delete", warning_minutes=0, max_attempts=1)
    assert results(c.run([policy], execute=True)) == [("warn", "nb-idle-0", "done")]
    c.api.deny("delete", "pods")
    run = c.run([policy], execute=True, at=AT + timedelta(seconds=1))
    assert [(r.kind, r.result) for r in run.records] == [
        ("delete", "forbidden"),
        ("delete", "gave-up"),
        ("clear-warning", "done"),
    ]
    pod = c.pod("ml", "nb-idle-0") or {}
    assert WARNING not in (pod["metadata"].get("annotations") or {})
    assert not c.going("ml", "nb-idle-0")
