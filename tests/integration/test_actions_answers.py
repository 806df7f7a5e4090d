"""Every step kind against every answer the API server gives, through the official client
over HTTP to the fake API server (tests/fakes/kube_faults.py plants the answers with the
real server's Status bodies): after each, the executor's state and the audit row.

The rule under test: the state changes only after the server's answer, with the audit row
that says what was sent and what came back; a refusal or failure leaves the state the next
run retries (one attempt counted), never a state that says the change happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, timedelta
from typing import Any

import pytest

from gpuscope.actions.executor_core import OwnerNotice
from tests.fakes.kube_faults import Answer
from tests.integration.test_actions import (  # noqa: F401  (fixtures)
    A0,
    A1,
    AT,
    B0,
    DATA_END,
    NB_BUSY,
    NB_IDLE,
    STEP,
    TAINT,
    TRAIN,
    Cluster,
    cluster,
    consolidation_policy,
    idle_policy,
    packed,
    plant_reservation,
    taints,
)
from tests.integration.test_idle import fill

POD = "/api/v1/namespaces/ml/pods/nb-idle-0"
NOTEBOOK = "/apis/kubeflow.org/v1/namespaces/ml/notebooks/nb-idle"
NODE = "/api/v1/nodes/node-c"
GOAL = "/api/v1/namespaces/ml/pods/wants4-0"
VICTIM = "/api/v1/namespaces/ml/pods/small-0/eviction"


@dataclass(frozen=True)
class Kind:
    """A step kind: the request it sends, and how to bring a cluster to that step."""

    name: str
    method: str
    path: str
    idle_action: str = ""  # idle steps: the policy's action ("" for the warning)


KINDS = [
    Kind("warn", "PATCH", POD),
    Kind("clear-warning", "PATCH", POD),
    Kind("delete", "DELETE", POD, "delete"),
    Kind("evict", "POST", POD + "/eviction", "evict"),
    Kind("stop-notebook", "PATCH", NOTEBOOK, "stop-notebook"),
    Kind("annotate", "PATCH", POD, "annotate"),
    Kind("reserve", "PATCH", NODE),
    Kind("tolerate", "PATCH", GOAL),
    Kind("evict-victim", "POST", VICTIM),
    Kind("lift", "PATCH", NODE),
]
ANSWERS: dict[str, Answer | None] = {
    "ok": None,
    "401": Answer(401),
    "403": Answer(403),
    "404": Answer(404),
    "409": Answer(409),
    "422": Answer(422),
    "429-retry-after": Answer(429, retry_after=3),
    "429": Answer(429),
    "500": Answer(500),
    "timeout": Answer(0),
}
#: The audit result per answer: a throttling 429 is retried (after Retry-After) and lands.
RESULT = {
    "ok": "done",
    "401": "unauthorized",
    "403": "forbidden",
    "404": "not-found",
    "409": "conflict",
    "422": "invalid",
    "429-retry-after": "done",
    "429": "done",
    "500": "failed",
    "timeout": "failed",
}
LANDS = {"ok", "429-retry-after", "429"}


class Notices:
    def __init__(self) -> None:
        self.sent: list[OwnerNotice] = []

    def notify(self, notice: OwnerNotice) -> bool:
        self.sent.append(notice)
        return True


def _clear(c: Cluster, answer: Answer | None, notices: Notices) -> Any:
    """A warned session busy again: its warning is taken back."""
    policy = idle_policy()
    first = c.run([policy], execute=True, notifier=notices)
    assert [r.result for r in first.records] == ["done"]  # warned
    later = DATA_END + timedelta(minutes=10)
    fill(c.store, [A0, A1, B0], [NB_IDLE, NB_BUSY, TRAIN], lambda g, ts: 0.7 if g != B0 else 0.0,
         start=DATA_END + timedelta(seconds=15), end=later, step=STEP)  # fmt: skip
    if answer is not None:
        c.api.script(answer, method="PATCH", path=POD)
    return c.run([policy], execute=True, at=later.replace(tzinfo=UTC), notifier=notices)


def _idle(c: Cluster, kind: Kind, answer: Answer | None, notices: Notices) -> Any:
    if kind.name == "clear-warning":
        return _clear(c, answer, notices)
    policy = idle_policy(action=kind.idle_action or "delete", warning_minutes=0)
    if kind.idle_action:
        first = c.run([policy], execute=True, notifier=notices)
        assert [r.result for r in first.records] == ["done"]  # warned
    if answer is not None:
        c.api.script(answer, method=kind.method, path=kind.path)
    at = AT + timedelta(seconds=1) if kind.idle_action else AT
    return c.run([policy], execute=True, at=at, notifier=notices)


def _consolidation(c: Cluster, kind: Kind, answer: Answer | None, notices: Notices) -> Any:
    policy = consolidation_policy()
    at = AT
    if kind.name == "lift":  # the job was bound: its reservation goes (and is not renewed)
        plant_reservation(c, AT + timedelta(minutes=20), state=True)
        pods = c.api.store.resource("pods")
        c.api.store.patch(pods, "ml", "wants4-0", {"spec": {"nodeName": "node-c"}})
        at = AT + timedelta(minutes=5)
    if answer is not None:
        c.api.script(answer, method=kind.method, path=kind.path)
    return c.run([policy], execute=True, at=at, notifier=notices)


@pytest.mark.parametrize("answer_name", list(ANSWERS))
@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_every_step_against_every_answer(
    kind: Kind,
    answer_name: str,
    request: pytest.FixtureRequest,
) -> None:
    answer = ANSWERS[answer_name]
    notices = Notices()
    idle = kind.name in ("warn", "clear-warning", "delete", "evict", "stop-notebook", "annotate")
    c: Cluster = request.getfixturevalue("cluster" if idle else "packed")
    run = (_idle if idle else _consolidation)(c, kind, answer, notices)
    step = kind.name.removesuffix("-victim")
    rec = next(r for r in run.records if r.kind == step)
    expected = RESULT[answer_name]
    if kind.name == "lift" and answer_name == "409":
        expected = "done"  # a node changed under us: re-read and sent again at once
    assert rec.result == expected, rec.message
    # the audit says what was sent and what came back
    assert rec.sent and not rec.sent.endswith("(dryRun=All)")
    if answer_name == "timeout":
        assert rec.status is None and "no answer in time" in rec.message
    elif expected == "done":
        assert rec.status == (201 if step == "evict" else 200)
    else:
        assert rec.status == int(answer_name[:3]) and rec.message
    if answer_name == "429-retry-after":
        assert 3.0 in c.sleeps  # the server's Retry-After, not a guess
    assert c.api.unanswered_scripts() == 0
    landed = answer_name in LANDS or expected == "done"
    _check_state(c, kind, answer_name, landed, notices)
    assert bool(run.refused) == (not landed and expected != "not-found")  # exit code 3


def _check_state(c: Cluster, kind: Kind, answer_name: str, landed: bool, notices: Notices) -> None:
    real = c.store.action_state(dry_run=False)
    idle = {k: v for k, v in real.items() if k.startswith("idle:")}
    pod = c.pod("ml", "nb-idle-0") or {}
    warned = "gpuscope.io/idle-warning" in (pod.get("metadata", {}).get("annotations") or {})
    if kind.name == "warn":
        row = next(iter(idle.values()), {})
        if landed:
            assert row["kind"] == "warning" and warned
            assert [n.labels["kind"] for n in notices.sent] == ["idle_action_warning"]
        elif answer_name == "404":
            assert idle == {} and not notices.sent  # gone: nothing to warn
        else:  # not warned: the next run warns again, and nobody was told
            assert row["kind"] == "retry" and row["attempts"] == 1 and not warned
            assert not notices.sent
    elif kind.name == "clear-warning":
        notices.sent.clear()  # the warning's own notice, before the step under test
        if landed:
            assert idle == {} and not warned
        elif answer_name == "404":  # the server says it is gone: nothing left to clear
            assert idle == {}
        else:  # still warned; the clear is tried again next run
            [row] = idle.values()
            assert row["kind"] == "warning" and row["attempts"] == 1 and warned
    elif kind.idle_action:
        [row] = idle.values()
        if landed or answer_name == "404":
            assert row["kind"] == "done"
        else:  # still warned; the act is tried again next run
            assert row["kind"] == "warning" and row["attempts"] == 1
    elif kind.name == "reserve":
        assert ("reserve:node-c" in real) == landed
        assert (TAINT in taints(c, "node-c")) == landed
    elif kind.name in ("tolerate", "evict-victim"):
        kept = landed or (kind.name == "evict-victim" and answer_name == "404")
        assert ("reserve:node-c" in real) == kept
        assert (TAINT in taints(c, "node-c")) == kept  # an abandoned plan lifts at once
    else:  # lift
        lifted = landed or answer_name == "404"
        if answer_name == "404":
            assert "reserve:node-c" not in real
        else:
            assert (TAINT not in taints(c, "node-c")) == lifted
            if not lifted:
                assert real["reserve:node-c"]["attempts"] == 1


def test_a_timeout_after_the_change_landed_is_recognised_on_the_next_run(
    request: pytest.FixtureRequest,
) -> None:
    """The delete went through but its answer was lost: the next run re-reads, sees the
    pod Terminating, and records the session done without sending anything."""
    c: Cluster = request.getfixturevalue("cluster")
    policy = idle_policy(action="delete", warning_minutes=0)
    c.run([policy], execute=True)
    c.api.script(Answer(0, apply=True), method="DELETE", path=POD)
    lost = c.run([policy], execute=True, at=AT + timedelta(seconds=1))
    assert [(r.kind, r.result) for r in lost.records] == [("delete", "failed")]
    assert c.going("ml", "nb-idle-0")
    deletes = c.api.count("DELETE")
    after = c.run([policy], execute=True, at=AT + timedelta(seconds=2))
    assert [(r.kind, r.result) for r in after.records] == [("delete", "skipped")]
    assert "Terminating" in after.records[0].message and c.api.count("DELETE") == deletes
    assert c.run([policy], execute=True, at=AT + timedelta(seconds=3)).records == []


def test_a_step_refused_max_attempts_times_is_given_up_visibly(
    request: pytest.FixtureRequest,
) -> None:
    c: Cluster = request.getfixturevalue("cluster")
    notices = Notices()
    policy = idle_policy(action="delete", warning_minutes=0, max_attempts=2)
    c.run([policy], execute=True, notifier=notices)
    c.api.deny("delete", "pods")
    one = c.run([policy], execute=True, at=AT + timedelta(seconds=1), notifier=notices)
    assert [r.result for r in one.records] == ["forbidden"]
    two = c.run([policy], execute=True, at=AT + timedelta(seconds=2), notifier=notices)
    # the owner's warning is cleared: the session will not be deleted (issue 25)
    assert [r.result for r in two.records] == ["forbidden", "gave-up", "done"]
    assert two.records[2].kind == "clear-warning"
    assert "gave up after 2 attempts" in two.records[1].message
    assert [n.labels["kind"] for n in notices.sent] == ["idle_action_warning", "action_gave_up"]
    assert c.run([policy], execute=True, at=AT + timedelta(seconds=3)).records == []
