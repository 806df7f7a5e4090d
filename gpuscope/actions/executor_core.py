"""The executor's core: its fields, the safety gates, sending one change and recording what
came of it, shared by the idle steps (gpuscope/actions/executor.py) and the node-freeing steps
(gpuscope/actions/node_freeing.py). See gpuscope/actions/executor.py for the rules it enforces.

One rule runs through it: the executor's state changes only after the API server answered,
in the same transaction as the audit row that says what was sent and what came back
(:meth:`ExecutorCore._outcome`). A failed step leaves its state as it was, with one more
attempt counted; at the policy's ``max_attempts`` it gives up, visibly (:meth:`_failed`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from gpuscope.actions.audit import EVENT_REASONS, ActionRecord, Result, step_id
from gpuscope.actions.kube import (
    ClusterClient,
    Conflict,
    DisruptionBlocked,
    Forbidden,
    Invalid,
    KubeError,
    NotFound,
    ObjectRef,
    Unauthorized,
)
from gpuscope.actions.plan import Step
from gpuscope.actions.policy import Policy
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import ActionsSettings

log = logging.getLogger("gpuscope.actions.executor")

WARNING_ANNOTATION = "gpuscope.io/idle-warning"
ACTION_ANNOTATION = "gpuscope.io/action"
#: Results after which the rest of the run would fail the same way: it stops.
STOPS_RUN: frozenset[str] = frozenset({"forbidden", "unauthorized", "failed"})


@dataclass(frozen=True, slots=True)
class OwnerNotice:
    """A message to a workload's owner, or to the operators (through the alerts routes)."""

    title: str
    text: str
    labels: Mapping[str, str]
    severity: str = "warning"


class Notifier(Protocol):
    """Sends a notice through the alerts module's routes; returns whether it was delivered."""

    def notify(self, notice: OwnerNotice) -> bool: ...


class StopRun(Exception):
    """An answer after which the rest of the run would fail the same way (401, 403, 5xx,
    no answer): the executor stops this run after recording it."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What came of one change: its result, the server's message, what was sent."""

    result: Result
    message: str = ""
    sent: str = ""
    status: int | None = None

    @property
    def ok(self) -> bool:
        return self.result in ("done", "would-do")


def result_of(exc: KubeError) -> Result:
    """The audit result for an error answer."""
    if isinstance(exc, NotFound):
        return "not-found"
    if isinstance(exc, DisruptionBlocked):
        return "blocked"
    if isinstance(exc, Conflict):
        return "conflict"
    if isinstance(exc, Invalid):
        return "invalid"
    if isinstance(exc, Forbidden):
        return "forbidden"
    if isinstance(exc, Unauthorized):
        return "unauthorized"
    return "failed"


@dataclass
class ExecutorCore:
    """What every step needs; ``execute`` False makes the whole run a dry run."""

    store: Store
    client: ClusterClient | None
    settings: ActionsSettings
    protected_namespaces: frozenset[str]
    execute: bool = False
    notifier: Notifier | None = None
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    records: list[ActionRecord] = field(default_factory=list)

    # -- modes and gates --------------------------------------------------------------------
    def dry_run_for(self, policy: Policy) -> bool:
        """New actions are dry unless the run executes, the policy says ``dry_run: false``
        and the kill switch is off (lifting a reservation is not a new action)."""
        return not self.execute or policy.dry_run or self.settings.kill_switch

    def state(self, dry_run: bool) -> dict[str, dict[str, Any]]:
        """The state rows of a mode, times as aware UTC datetimes."""
        rows = self.store.action_state(dry_run=dry_run)
        for row in rows.values():
            for key in ("created_at", "due_at"):
                if isinstance(row.get(key), datetime) and row[key].tzinfo is None:
                    row[key] = row[key].replace(tzinfo=UTC)
        return rows

    def _held_back(self, step: Step) -> str:
        """Why a safety rule holds this step back ("" when none does)."""
        ns = step.namespace
        if ns and ns in self.protected_namespaces:
            return f"namespace {ns} is protected"
        allow = self.settings.allowlist_namespaces
        if ns and allow and ns not in allow:
            return f"namespace {ns} is not in actions.allowlist_namespaces"
        return ""

    def _over_rate(self, dry: bool, now: datetime) -> str:
        limit = self.settings.max_actions_per_hour
        done = self.store.count_actions_since(now - timedelta(hours=1), dry_run=dry)
        if done >= limit:
            return f"rate limit: {limit} actions per hour reached"
        return ""

    # -- one change -------------------------------------------------------------------------
    def _send(self, dry: bool, what: str, fn: Callable[[ClusterClient], object]) -> Answer:
        """Send one change; its answer (never raises for an API answer)."""
        sent = f"{what} (dryRun=All)" if dry else what
        if self.client is None:
            return Answer("would-do", "planned (no Kubernetes API)")
        self.client.last_status = None
        try:
            fn(self.client)
        except KubeError as exc:
            return Answer(result_of(exc), str(exc), sent, exc.status)
        return Answer("would-do" if dry else "done", "", sent, self.client.last_status)

    # -- recording --------------------------------------------------------------------------
    def _rec(self, step: Step, dry: bool, answer: Answer, kind: str | None = None) -> ActionRecord:
        now = self.clock()
        kind = kind or step.action
        return ActionRecord(
            id=step_id(step.policy.name, kind, step.key, step.uid, step.pod, now.isoformat()),
            at=now,
            kind=kind,
            policy=step.policy.name,
            dry_run=dry,
            result=answer.result,
            reason=step.reason,
            namespace=step.namespace,
            pod=step.pod,
            node=step.node,
            uid=step.uid,
            gpus=step.gpus,
            finding_id=step.finding_id,
            goal=step.goal,
            gpu_hours_freed=step.gpu_hours_freed if answer.ok else None,
            message=answer.message,
            sent=answer.sent,
            status=answer.status,
        )

    def _outcome(
        self,
        step: Step,
        dry: bool,
        answer: Answer,
        *,
        save: Iterable[Mapping[str, Any]] = (),
        delete: Iterable[str] = (),
        kind: str | None = None,
        extra: Iterable[ActionRecord] = (),
    ) -> ActionRecord:
        """Record the audit row and the state change it causes, in one transaction; then,
        for a change the server accepted, a Kubernetes Event."""
        rec = self._rec(step, dry, answer, kind)
        recs = [rec, *extra]
        self.store.record_action_outcome(
            [r.as_record() for r in recs], self.clock(), dry_run=dry, save=save, delete=delete
        )
        self.records.extend(recs)
        for r in recs:
            log.log(
                logging.DEBUG if dry else logging.INFO,
                "action kind=%s result=%s dry_run=%s policy=%s target=%s",
                r.kind,
                r.result,
                dry,
                r.policy,
                f"{r.namespace}/{r.pod}" if r.pod else r.node,
            )
        if answer.ok and answer.sent and self.client is not None:
            self._event(step, rec, dry)
        return rec

    def _failed(
        self,
        step: Step,
        dry: bool,
        answer: Answer,
        row: Mapping[str, Any] | None,
        *,
        kind: str | None = None,
    ) -> None:
        """A failed step: its state as it was, one more attempt counted (``row``: the state
        to keep, None for none yet); at ``max_attempts`` the step gives up, with a
        ``gave-up`` audit row and a notice through the alerts routes."""
        old = self.state(dry).get(step.key) or {}
        attempts = int(old.get("attempts") or 0) + 1
        base = dict(row) if row is not None else self._state_row(step, "retry", dry=dry)
        base.update(attempts=attempts, last_error=answer.message[:500])
        if attempts < step.policy.max_attempts:
            self._outcome(step, dry, answer, save=[base], kind=kind)
        else:
            why = (
                f"gave up after {attempts} attempts (policy {step.policy.name} "
                f"max_attempts={step.policy.max_attempts}); last answer: {answer.message}"
            )
            gave_up = self._rec(step, dry, Answer("gave-up", why), kind)
            base.update(kind="gave-up", due_at=None)
            self._outcome(step, dry, answer, save=[base], kind=kind, extra=[gave_up])
            self._alert(step, why, dry)
            self._gave_up(step, dry)
        if answer.result in STOPS_RUN:
            raise StopRun(answer.message)

    def _gave_up(self, step: Step, dry: bool) -> None:
        """What a step given up leaves to tidy (the idle executor clears its warning)."""

    def _alert(self, step: Step, why: str, dry: bool) -> None:
        if dry or self.notifier is None:
            return
        target = f"{step.namespace}/{step.pod}" if step.pod else f"node {step.node}"
        self.notifier.notify(
            OwnerNotice(
                title=f"gpuscope gave up: {step.action} {target}",
                text=why,
                labels={
                    "namespace": step.namespace,
                    "pod": step.pod,
                    "node": step.node,
                    "policy": step.policy.name,
                    "kind": "action_gave_up",
                },
            )
        )

    def _event(self, step: Step, rec: ActionRecord, dry: bool) -> None:
        """The Kubernetes Event for a change that landed. The change stands whatever comes
        of it, but a refused Event (RBAC without ``events: create``, a 5xx) is a step of its
        own in the audit, kind ``event``, with the server's answer: ``gpuscope act`` lists it
        and exits 3, so a site that expects ``kubectl describe`` to show gpuscope's actions
        learns that it does not."""
        assert self.client is not None
        if rec.pod:
            about = ObjectRef("Pod", rec.pod, rec.namespace, rec.uid)
        elif rec.node:
            about = ObjectRef("Node", rec.node)
        else:
            return
        warning = rec.kind in ("warn", "delete", "evict", "stop-notebook")
        message = f"{rec.kind} by gpuscope policy {rec.policy}: {rec.reason}"
        try:
            self.client.create_event(
                about,
                EVENT_REASONS.get(rec.kind, "Gpuscope"),
                message,
                rec.at,
                warning=warning,
                dry_run=dry,
            )
        except KubeError as exc:  # the action stands; the missing Event is recorded
            log.warning("event not recorded kind=%s error=%s", rec.kind, exc)
            what = f"pod {rec.namespace}/{rec.pod}" if rec.pod else f"node {rec.node}"
            answer = Answer(
                result_of(exc),
                f"the {rec.kind} landed, but its Event was not recorded: {exc}",
                f"create event on {what}",
                exc.status,
            )
            event = replace(self._rec(step, dry, answer, "event"), gpu_hours_freed=None)
            self.store.record_action_outcome(
                [event.as_record()], self.clock(), dry_run=dry, save=(), delete=()
            )
            self.records.append(event)

    def _state_row(
        self, step: Step, kind: str, due_at: datetime | None = None, *, dry: bool
    ) -> dict[str, Any]:
        return {
            "key": step.key,
            "dry_run": dry,
            "kind": kind,
            "due_at": due_at,
            "policy": step.policy.name,
            "namespace": step.namespace,
            "pod": step.pod,
            "uid": step.uid,
            "node": step.node,
            "goal": step.goal,
            "attempts": 0,
        }
