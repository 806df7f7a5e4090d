"""The executor: the only code that changes the cluster (docs/design.md, gpuscope/actions/).

It takes the planners' steps and carries them out through
:class:`~gpuscope.actions.kube.ClusterClient`,
enforcing every safety rule itself, whatever the planner said (descheduler's evictor, one
place that enforces limits):

- dry run unless the run executes *and* the policy says ``dry_run: false`` *and* the kill
  switch (``actions.kill_switch``) is off; a dry run goes down the same path, with the API
  server's own dry run (``dryRun=All``) for every change, or no request at all without a
  cluster, and keeps its simulated timeline (warnings) apart from the real one. Lifting a
  reservation is not a new action: an executing run lifts with the kill switch on too;
- protected namespaces and pods, and the allowlist (``actions.allowlist_namespaces``);
- a rate limit of acts per rolling hour (``actions.max_actions_per_hour``);
- every object is read again right before it is changed: gone, re-created under the same
  name (another UID), Terminating or already in the wanted state means nothing is sent;
  the change carries the UID (and, for patches, the resourceVersion) it was read with;
- the state (``action_state``) changes only after the API server answered, in the same
  transaction as the audit row; a refused or failed step is tried again next run, up to
  the policy's ``max_attempts``, then given up with a ``gave-up`` row and an alert;
- 401, 403, 5xx and timeouts stop the run (the rest would fail the same way).

Every step becomes an :class:`~gpuscope.actions.audit.ActionRecord` with what was sent and what the
server answered; a change the server accepted also becomes a Kubernetes Event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from gpuscope.actions.executor_core import (
    ACTION_ANNOTATION,
    WARNING_ANNOTATION,
    Answer,
    ExecutorCore,
    Notifier,
    OwnerNotice,
    StopRun,
    log,
    result_of,
)
from gpuscope.actions.group_freeing import GroupFreeing
from gpuscope.actions.kube import KUBEFLOW_STOPPED, ClusterClient, KubeError, Obj
from gpuscope.actions.plan import Step
from gpuscope.actions.reservation import terminating

GUARDED = "(uid, resourceVersion guarded)"
__all__ = ["Executor", "ExecutorCore", "Notifier", "OwnerNotice", "StopRun"]


class Executor(GroupFreeing):
    """Carries out steps; ``execute`` False makes the whole run a dry run. The idle and
    time-limit steps are here; consolidation's are in :class:`GroupFreeing` (pod groups)
    and :class:`NodeFreeing` (single pods)."""

    def run_idle(self, steps: Sequence[Step]) -> None:
        """Warn, act on or clear each idle session; stops at 401, 403, 5xx or no answer."""
        for step in steps:
            dry = self.dry_run_for(step.policy)
            try:
                self._idle_step(step, dry)
            except StopRun as exc:
                log.warning("actions stopped policy=%s error=%s", step.policy.name, exc)
                return

    def _idle_step(self, step: Step, dry: bool) -> None:
        if step.action != "clear-warning":
            held = self._held_back(step)
            if not held and step.action != "warn":
                held = self._over_rate(dry, self.clock())
            if not held and step.action == "stop-notebook" and not step.notebook:
                held = "no Kubeflow Notebook owns this pod (stop-notebook needs one)"
            if held:
                self._outcome(step, dry, Answer("skipped", held))
                return
        if self.client is None:  # plan only: the timeline as if every change landed
            self._landed(step, dry, Answer("would-do", "planned (no Kubernetes API)"), None)
            return
        pod = self._reread(step, dry)
        if pod is not None:
            self._change(step, dry, pod)

    def _gave_up(self, step: Step, dry: bool) -> None:
        """An act given up leaves no warning on the pod: the owner was told the session
        would be stopped, and it will not be (by this policy). Best effort, recorded as a
        ``clear-warning`` step; the ``gave-up`` state stays."""
        if step.action in ("warn", "clear-warning") or self.client is None:
            return
        try:
            pod = self.client.get_pod(step.namespace, step.pod)
        except KubeError as exc:
            log.warning("warning not cleared after giving up pod=%s error=%s", step.pod, exc)
            return
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        mine = str(annotations.get(WARNING_ANNOTATION, ""))
        if not mine.startswith(f"{step.policy.name}:"):
            return
        what = f"annotate pod {step.namespace}/{step.pod} remove {WARNING_ANNOTATION} {GUARDED}"
        answer = self._send(
            dry, what, lambda c: c.annotate_pod(pod, {WARNING_ANNOTATION: None}, dry_run=dry)
        )
        self._outcome(step, dry, answer, kind="clear-warning")

    def _warned_row(self, step: Step, dry: bool, due: datetime | None) -> dict[str, Any]:
        return self._state_row(step, "warning", due, dry=dry)

    def _reread(self, step: Step, dry: bool) -> Obj | None:
        """The pod as it is now, or None after recording why nothing is sent."""
        assert self.client is not None
        try:
            pod = self.client.get_pod(step.namespace, step.pod)
        except KubeError as exc:
            answer = Answer(result_of(exc), str(exc))
            if answer.result == "not-found":
                self._gone(step, dry, answer)
            else:
                self._failed(step, dry, answer, self._current(step, dry))
            return None
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        if step.uid and uid != step.uid:
            why = f"pod {step.namespace}/{step.pod} is another pod now (UID {uid}, planned {step.uid})"  # noqa: E501
            self._gone(step, dry, Answer("conflict", why))
            return None
        if terminating(pod):
            why = f"pod {step.namespace}/{step.pod} is Terminating already"
            self._gone(step, dry, Answer("skipped", why))
            return None
        return pod

    def _current(self, step: Step, dry: bool) -> dict[str, Any] | None:
        """The state row a failure keeps: a warned session stays warned."""
        row = self.state(dry).get(step.key)
        return row if row is not None and row.get("kind") == "warning" else None

    def _gone(self, step: Step, dry: bool, answer: Answer) -> None:
        """The session this step was for is gone (404, another UID, Terminating): nothing
        to do, now or later; a warn or clear forgets it (with an audit row: a clear's patch
        answered 404 was sent), an act counts as done."""
        if step.action in ("warn", "clear-warning"):
            self._outcome(step, dry, answer, delete=[step.key])
        else:
            self._outcome(step, dry, answer, save=[self._state_row(step, "done", dry=dry)])

    def _change(self, step: Step, dry: bool, pod: Obj) -> None:
        """Send the step's change to ``pod`` (as just read), unless it is there already."""
        request = self._request(step, dry, pod)
        if request is None:
            return
        answer = self._send(dry, *request)
        if answer.ok:
            self._landed(step, dry, answer, pod)
        elif answer.result == "not-found":
            self._gone(step, dry, answer)
        else:
            self._failed(step, dry, answer, self._current(step, dry))

    def _request(
        self, step: Step, dry: bool, pod: Obj
    ) -> tuple[str, Callable[[ClusterClient], object]] | None:
        """What to send for ``step`` (a description and the call), or None after recording
        that nothing needs sending (already done)."""
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        target = f"pod {step.namespace}/{step.pod}"
        if step.action == "warn":
            mine = str(annotations.get(WARNING_ANNOTATION, ""))
            if mine.startswith(f"{step.policy.name}:"):
                answer = Answer("skipped", f"already warned ({WARNING_ANNOTATION}: {mine})")
                due = _due_in(mine) or step.due_at
                self._outcome(step, dry, answer, save=[self._warned_row(step, dry, due)])
                return None
            when = step.due_at.isoformat() if step.due_at else ""
            note = f"{step.policy.name}: {step.policy.action} at {when}"
            return f"annotate {target} {WARNING_ANNOTATION} {GUARDED}", lambda c: c.annotate_pod(
                pod, {WARNING_ANNOTATION: note}, dry_run=dry
            )
        if step.action == "clear-warning":
            if WARNING_ANNOTATION not in annotations:  # nothing to clear: forget it quietly
                self.store.delete_action_state([step.key], dry_run=dry)
                return None
            return (
                f"annotate {target} remove {WARNING_ANNOTATION} {GUARDED}",
                lambda c: c.annotate_pod(pod, {WARNING_ANNOTATION: None}, dry_run=dry),
            )
        if step.action == "delete":
            return f"delete {target} (uid precondition)", lambda c: c.delete_pod(
                step.namespace, step.pod, step.uid, dry_run=dry
            )
        if step.action == "evict":
            return f"evict {target} (uid precondition)", lambda c: c.evict_pod(
                step.namespace, step.pod, step.uid, dry_run=dry
            )
        if step.action == "annotate":
            value = f"{step.policy.name}: idle"
            if annotations.get(ACTION_ANNOTATION) == value:
                answer = Answer("skipped", f"already annotated ({ACTION_ANNOTATION}: {value})")
                self._outcome(step, dry, answer, save=[self._state_row(step, "done", dry=dry)])
                return None
            change = {ACTION_ANNOTATION: value, WARNING_ANNOTATION: None}
            return f"annotate {target} {ACTION_ANNOTATION} {GUARDED}", lambda c: c.annotate_pod(
                pod, change, dry_run=dry
            )
        notebook = self._notebook(step, dry)  # stop-notebook
        if notebook is None:
            return None
        now = self.clock()
        what = f"patch notebook {step.namespace}/{step.notebook} {KUBEFLOW_STOPPED} {GUARDED}"
        return what, lambda c: c.stop_notebook(notebook, now, dry_run=dry)

    def _notebook(self, step: Step, dry: bool) -> Obj | None:
        assert self.client is not None
        try:
            notebook = self.client.get_notebook(step.namespace, step.notebook)
        except KubeError as exc:
            answer = Answer(result_of(exc), str(exc))
            if answer.result == "not-found":
                self._gone(step, dry, answer)
            else:
                self._failed(step, dry, answer, self._current(step, dry))
            return None
        stopped = ((notebook.get("metadata") or {}).get("annotations") or {}).get(KUBEFLOW_STOPPED)
        if stopped:
            answer = Answer(
                "skipped", f"notebook already stopped (kubeflow-resource-stopped: {stopped})"
            )
            self._outcome(step, dry, answer, save=[self._state_row(step, "done", dry=dry)])
            return None
        return notebook

    def _landed(self, step: Step, dry: bool, answer: Answer, pod: Obj | None) -> None:
        """The server accepted the change (or a plan-only run assumes it): the state moves
        on, in the audit row's transaction."""
        if step.action == "warn":
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
            if delivered:
                answer = Answer(answer.result, "owner notified", answer.sent, answer.status)
            self._outcome(step, dry, answer, save=[self._warned_row(step, dry, step.due_at)])
        elif step.action == "clear-warning":
            self._outcome(step, dry, answer, delete=[step.key])
        else:
            self._outcome(step, dry, answer, save=[self._state_row(step, "done", dry=dry)])


def _due_in(note: str) -> datetime | None:
    """The due time in a warning annotation (``policy: action at <RFC 3339>``)."""
    _, _, when = note.rpartition(" at ")
    try:
        return datetime.fromisoformat(when.strip())
    except ValueError:
        return None


def _done(step: Step) -> str:
    return {
        "delete": "deleted",
        "evict": "evicted",
        "stop-notebook": "stopped",
        "annotate": "flagged",
    }.get(step.policy.action, step.policy.action)
