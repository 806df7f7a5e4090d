"""The executor: the only code that changes the cluster (docs/design.md, actions/).

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

from collections.abc import Callable, Sequence

from actions.executor_core import (
    ACTION_ANNOTATION,
    WARNING_ANNOTATION,
    ExecutorCore,
    Notifier,
    OwnerNotice,
    StopRun,
    log,
)
from actions.kube import ClusterClient, DisruptionBlocked, NotFound
from actions.node_freeing import NodeFreeing
from actions.plan import Step

__all__ = ["Executor", "ExecutorCore", "Notifier", "OwnerNotice", "StopRun"]


class Executor(NodeFreeing):
    """Carries out steps; ``execute`` False makes the whole run a dry run. The idle and
    time-limit steps are here; consolidation's are in :class:`NodeFreeing`."""

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


def _done(step: Step) -> str:
    return {
        "delete": "deleted",
        "evict": "evicted",
        "stop-notebook": "stopped",
        "annotate": "flagged",
    }.get(step.policy.action, step.policy.action)
