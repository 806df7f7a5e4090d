"""The executor's core: its fields, the safety gates, recording and the API call wrapper,
shared by the idle steps (actions/executor.py) and the node-freeing steps
(actions/node_freeing.py). See actions/executor.py for the rules it enforces.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from actions.audit import EVENT_REASONS, ActionRecord, Result, step_id
from actions.kube import (
    ClusterClient,
    Conflict,
    DisruptionBlocked,
    Forbidden,
    KubeError,
    NotFound,
    ObjectRef,
)
from actions.plan import Step
from actions.policy import Policy
from collector.store import Store
from gpuscope.settings import ActionsSettings

log = logging.getLogger("actions.executor")

WARNING_ANNOTATION = "gpuscope.io/idle-warning"
ACTION_ANNOTATION = "gpuscope.io/action"
CORDON_ANNOTATION = "gpuscope.io/cordoned-for"
CORDON_UNTIL_ANNOTATION = "gpuscope.io/cordoned-until"


@dataclass(frozen=True, slots=True)
class OwnerNotice:
    """A message to a workload's owner (through the alerts module's routes)."""

    title: str
    text: str
    labels: Mapping[str, str]
    severity: str = "warning"


class Notifier(Protocol):
    """Tells a workload's owner about a coming action; returns whether it was delivered."""

    def notify(self, notice: OwnerNotice) -> bool: ...


class StopRun(Exception):
    """An unexpected answer: the executor stops this run after recording it."""


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

    # -- recording --------------------------------------------------------------------------
    def _record(
        self, step: Step, dry: bool, result: Result, message: str = "", kind: str | None = None
    ) -> ActionRecord:
        now = self.clock()
        rec = ActionRecord(
            id=step_id(
                step.policy.name, kind or step.action, step.key, step.uid, step.pod, now.isoformat()
            ),
            at=now,
            kind=kind or step.action,
            policy=step.policy.name,
            dry_run=dry,
            result=result,
            reason=step.reason,
            namespace=step.namespace,
            pod=step.pod,
            node=step.node,
            uid=step.uid,
            gpus=step.gpus,
            finding_id=step.finding_id,
            goal=step.goal,
            gpu_hours_freed=step.gpu_hours_freed if result in ("done", "would-do") else None,
            message=message or ("planned (no Kubernetes API)" if self.client is None else ""),
        )
        self.store.record_actions([rec.as_record()], now)
        self.records.append(rec)
        log.log(
            logging.DEBUG if dry else logging.INFO,
            "action kind=%s result=%s dry_run=%s policy=%s target=%s",
            rec.kind,
            result,
            dry,
            rec.policy,
            f"{rec.namespace}/{rec.pod}" if rec.pod else rec.node,
        )
        if result in ("done", "would-do") and self.client is not None:
            self._event(rec, dry)
        return rec

    def _event(self, rec: ActionRecord, dry: bool) -> None:
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
        except KubeError as exc:  # an Event is a courtesy; never fails the action
            log.warning("event not recorded kind=%s error=%s", rec.kind, exc)

    def _call(self, step: Step, dry: bool, fn: Callable[[ClusterClient], object]) -> Result:
        """Run one API call for ``step``; map the answer to a result (raising StopRun for
        answers that must stop the run, after recording them)."""
        if self.client is None:
            return "would-do"
        try:
            fn(self.client)
        except NotFound as exc:
            self._record(step, dry, "not-found", str(exc))
            raise
        except DisruptionBlocked as exc:
            self._record(step, dry, "blocked", str(exc))
            raise
        except Conflict as exc:
            self._record(step, dry, "conflict", str(exc))
            raise StopRun(str(exc)) from None
        except Forbidden as exc:
            self._record(step, dry, "forbidden", str(exc))
            raise StopRun(str(exc)) from None
        except KubeError as exc:
            self._record(step, dry, "failed", str(exc))
            raise StopRun(str(exc)) from None
        return "would-do" if dry else "done"

    def _state_row(self, step: Step, kind: str, due_at: datetime | None = None) -> dict[str, Any]:
        return {
            "key": step.key,
            "dry_run": self.dry_run_for(step.policy),
            "kind": kind,
            "due_at": due_at,
            "policy": step.policy.name,
            "namespace": step.namespace,
            "pod": step.pod,
            "uid": step.uid,
            "node": step.node,
            "goal": step.goal,
        }
