"""The executor: the only code that changes the cluster (DESIGN.md, actions/).

It takes the planners' steps and carries them out through :class:`~actions.kube.ClusterClient`,
enforcing every safety rule itself, whatever the planner said (descheduler's evictor, one
place that enforces limits):

- dry run unless the run executes *and* the policy says ``dry_run: false`` *and* the kill
  switch (``actions.kill_switch``) is off; a dry run goes down the same path, with the API
  server's own dry run (``dryRun=All``) for every change, or no request at all without a
  cluster, and keeps its simulated timeline (warnings, cordons) apart from the real one;
- protected namespaces and pods, and the allowlist (``actions.allowlist_namespaces``);
- a rate limit of acts per rolling hour (``actions.max_actions_per_hour``);
- state written before acting (``action_state``), so running twice never acts twice and a
  crash mid-way is undone on the next run (a cordon of ours is lifted);
- consolidation stops at the first unexpected answer; a PodDisruptionBudget's 429 is
  "not now": the node's cordon is lifted and the goal waits for a later run.

Every step becomes an :class:`~actions.audit.ActionRecord`, stored at once (the audit
survives a crash too) and, where it touched a pod or node, a Kubernetes Event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
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
from actions.plan import LAST_CONSOLIDATION, Step, steps_by_node
from actions.policy import Policy
from collector.store import Store
from gpuscope.settings import ActionsSettings

log = logging.getLogger(__name__)

WARNING_ANNOTATION = "gpuscope.io/idle-warning"
ACTION_ANNOTATION = "gpuscope.io/action"
CORDON_ANNOTATION = "gpuscope.io/cordoned-for"
CORDON_UNTIL_ANNOTATION = "gpuscope.io/cordoned-until"
#: Steps that count against the rate limit (warnings, cordons and notes do not).
ACTS = frozenset({"delete", "evict", "stop-notebook", "annotate"})


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
class Executor:
    """Carries out steps; ``execute`` False makes the whole run a dry run."""

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

    # -- idle and time-limit policies ----------------------------------------------------------
    def run_idle(self, steps: Sequence[Step]) -> None:
        """Warn, act on or clear each idle session; stops at forbidden or failed answers."""
        for step in steps:
            dry = self.dry_run_for(step.policy)
            try:
                if step.action == "warn":
                    self._warn(step, dry)
                elif step.action == "clear-warning":
                    self._clear(step, dry)
                else:
                    self._act(step, dry)
            except StopRun as exc:
                log.warning("actions stopped policy=%s error=%s", step.policy.name, exc)
                return

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

    def _warn(self, step: Step, dry: bool) -> None:
        held = self._held_back(step)
        if held:
            self._record(step, dry, "skipped", held)
            return
        self.store.save_action_state([self._state_row(step, "warning", step.due_at)], self.clock())
        due = step.due_at.isoformat() if step.due_at else ""
        note = f"{step.policy.name}: {step.policy.action} at {due}"
        try:
            result = self._call(
                step,
                dry,
                lambda c: c.annotate_pod(
                    step.namespace, step.pod, {WARNING_ANNOTATION: note}, dry_run=dry
                ),
            )
        except (NotFound, DisruptionBlocked):
            self.store.delete_action_state([step.key], dry_run=dry)
            return
        delivered = False
        if not dry and self.notifier is not None:
            delivered = self.notifier.notify(
                OwnerNotice(
                    title=f"GPU session {step.namespace}/{step.pod} will be {_done(step)}",
                    text=step.reason,
                    labels={
                        "namespace": step.namespace,
                        "pod": step.pod,
                        "policy": step.policy.name,
                        "kind": "idle_action_warning",
                    },
                )
            )
        self._record(step, dry, result, "owner notified" if delivered else "")

    def _clear(self, step: Step, dry: bool) -> None:
        try:
            result = self._call(
                step,
                dry,
                lambda c: c.annotate_pod(
                    step.namespace, step.pod, {WARNING_ANNOTATION: None}, dry_run=dry
                ),
            )
        except (NotFound, DisruptionBlocked):
            result = None
        self.store.delete_action_state([step.key], dry_run=dry)
        if result is not None:
            self._record(step, dry, result)

    def _act(self, step: Step, dry: bool) -> None:
        held = self._held_back(step) or self._over_rate(dry, self.clock())
        if step.action == "stop-notebook" and not step.notebook:
            held = held or "no Kubeflow Notebook owns this pod (stop-notebook needs one)"
        if held:
            self._record(step, dry, "skipped", held)
            return
        self.store.save_action_state([self._state_row(step, "acting")], self.clock())
        now = self.clock()
        calls: dict[str, Callable[[ClusterClient], object]] = {
            "delete": lambda c: c.delete_pod(step.namespace, step.pod, step.uid, dry_run=dry),
            "evict": lambda c: c.evict_pod(step.namespace, step.pod, step.uid, dry_run=dry),
            "stop-notebook": lambda c: c.stop_notebook(
                step.namespace, step.notebook, now, dry_run=dry
            ),
            "annotate": lambda c: c.annotate_pod(
                step.namespace,
                step.pod,
                {ACTION_ANNOTATION: f"{step.policy.name}: idle", WARNING_ANNOTATION: None},
                dry_run=dry,
            ),
        }
        try:
            result = self._call(step, dry, calls[step.action])
        except NotFound:
            self.store.save_action_state([self._state_row(step, "done")], self.clock())
            return
        except DisruptionBlocked:
            self.store.save_action_state(
                [self._state_row(step, "warning", self.clock())], self.clock()
            )
            return
        self.store.save_action_state([self._state_row(step, "done")], self.clock())
        self._record(step, dry, result)

    # -- consolidation ----------------------------------------------------------------------
    def run_consolidation(self, steps: Sequence[Step]) -> None:
        """Cordon, let the goal tolerate the cordon, evict; node by node, within limits."""
        for node, group in steps_by_node(steps).items():
            try:
                if not self._free_node(node, group):
                    return
            except (StopRun, KubeError) as exc:
                log.warning("consolidation stopped node=%s error=%s", node, exc)
                self._lift(group[0], "stopped at an unexpected answer")
                return
        if steps:
            first = steps[0]
            dry = self.dry_run_for(first.policy)
            row = {
                "key": LAST_CONSOLIDATION,
                "dry_run": dry,
                "kind": "consolidation",
                "created_at": self.clock(),
                "due_at": None,
            }
            self.store.delete_action_state([LAST_CONSOLIDATION], dry_run=dry)
            self.store.save_action_state([row], self.clock())

    def _free_node(self, node: str, group: Sequence[Step]) -> bool:
        cordon = group[0]
        dry = self.dry_run_for(cordon.policy)
        for step in group:
            held = self._held_back(step)
            if held:
                self._record(cordon, dry, "skipped", f"{held}; {node} left alone")
                return True
        if self._over_rate(dry, self.clock()):
            self._record(cordon, dry, "skipped", self._over_rate(dry, self.clock()))
            return False
        if self.client is not None:
            try:
                spec = self.client.get_node(node).get("spec") or {}
            except NotFound as exc:
                self._record(cordon, dry, "not-found", str(exc))
                return True
            if spec.get("unschedulable"):
                self._record(cordon, dry, "skipped", f"{node} is already cordoned by someone else")
                return True
        # state first: a crash after the cordon still has it lifted by the next run
        self.store.save_action_state(
            [self._state_row(cordon, "cordon", cordon.due_at)], self.clock()
        )
        until = cordon.due_at.isoformat() if cordon.due_at else ""
        result = self._call(
            cordon,
            dry,
            lambda c: c.set_unschedulable(
                node,
                True,
                {CORDON_ANNOTATION: cordon.goal or "", CORDON_UNTIL_ANNOTATION: until},
                dry_run=dry,
            ),
        )
        self._record(cordon, dry, result)
        for step in group[1:]:
            if step.action == "tolerate":
                self._tolerate(step, dry)
                continue
            try:
                result = self._call(step, dry, lambda c, s=step: self._evict(c, s, dry))  # type: ignore[misc]
            except NotFound:
                continue  # gone already: its room is free
            except DisruptionBlocked:
                self._lift(cordon, "a PodDisruptionBudget allows no eviction now")
                return True
            self._record(step, dry, result)
        return True

    def _evict(self, client: ClusterClient, step: Step, dry: bool) -> object:
        uid = step.uid or str(client.get_pod(step.namespace, step.pod)["metadata"]["uid"])
        return client.evict_pod(step.namespace, step.pod, uid, dry_run=dry)

    def _tolerate(self, step: Step, dry: bool) -> None:
        def go(c: ClusterClient) -> object:
            pod = c.get_pod(step.namespace, step.pod)
            tolerations = list((pod.get("spec") or {}).get("tolerations") or [])
            return c.tolerate_unschedulable(step.namespace, step.pod, tolerations, dry_run=dry)

        try:
            self._record(step, dry, self._call(step, dry, go))
        except (NotFound, DisruptionBlocked):
            return

    def _lift(self, cordon: Step, why: str) -> None:
        """Uncordon a node we cordoned (our annotation says so) and forget the cordon."""
        dry = self.dry_run_for(cordon.policy)
        step = Step(
            "uncordon", cordon.policy, why, node=cordon.node, key=cordon.key, goal=cordon.goal
        )

        def go(c: ClusterClient) -> object:
            node = c.get_node(cordon.node)
            ours = CORDON_ANNOTATION in ((node.get("metadata") or {}).get("annotations") or {})
            if not ours and not dry:
                return None  # never cordoned, or lifted by someone else: leave it
            return c.set_unschedulable(
                cordon.node,
                False,
                {CORDON_ANNOTATION: None, CORDON_UNTIL_ANNOTATION: None},
                dry_run=dry,
            )

        try:
            self._record(step, dry, self._call(step, dry, go))
        except (NotFound, DisruptionBlocked):
            pass
        except StopRun:
            return  # recorded; the state row stays, so the next run tries again
        self.store.delete_action_state([cordon.key], dry_run=dry)

    def reconcile(self, policies: Iterable[Policy]) -> None:
        """Lift our cordons whose goal is bound or gone, or whose deadline passed (also
        those a crashed run left behind)."""
        by_name = {p.name: p for p in policies}
        now = self.clock()
        for dry in (True, False):
            for key, row in self.state(dry).items():
                if row["kind"] != "cordon" or row.get("policy") not in by_name:
                    continue
                policy = by_name[row["policy"]]
                if self.dry_run_for(policy) != dry:
                    continue
                why = self._lift_reason(row, now)
                if why:
                    cordon = Step(
                        "cordon", policy, why, node=str(row["node"]), key=key, goal=row.get("goal")
                    )
                    self._lift(cordon, why)

    def _lift_reason(self, row: Mapping[str, Any], now: datetime) -> str:
        if row["due_at"] is not None and row["due_at"] <= now:
            return "cordon deadline passed"
        goal = str(row.get("goal") or "")
        if self.client is None or "/" not in goal:
            return ""
        ns, _, name = goal.partition("/")
        try:
            pod = self.client.get_pod(ns, name)
        except NotFound:
            return f"{goal} is gone"
        except KubeError:
            return ""
        bound = (pod.get("spec") or {}).get("nodeName")
        return f"{goal} is bound to {bound}" if bound else ""


def _done(step: Step) -> str:
    return {
        "delete": "deleted",
        "evict": "evicted",
        "stop-notebook": "stopped",
        "annotate": "flagged",
    }.get(step.policy.action, step.policy.action)
