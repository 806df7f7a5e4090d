"""Consolidation steps: free a node for one pending pod, and reserve it for that pod alone.

Per node of the plan (gpuscope/actions/reservation.py says why a taint and no cordon):

1. ``reserve``: read the node; leave it alone if it is cordoned (someone's maintenance) or
   reserved already; else add the taint ``gpuscope.io/reserved-for=<pod>:NoSchedule`` and
   the annotations naming the pod and the deadline, guarded by the node's UID and
   resourceVersion. The state row is written with the audit row once the server said yes.
2. ``tolerate``: read the pending pod; give it the one matching toleration (nothing sent if
   it has it). Gone, bound, Terminating or another UID: the plan is abandoned.
3. ``evict`` each planned pod through the Eviction API, each read first: one gone or
   Terminating already is skipped (its room is freed anyway); another UID abandons the plan.

An abandoned plan (a PodDisruptionBudget's 429, any refusal or failure) lifts the taint at
once; a plan whose every step landed marks its state row ``freed``. Every run first
reconciles (:meth:`NodeFreeing.reconcile`): it lists the nodes, and lifts each reservation
of gpuscope's own whose pod is bound, gone, Terminating or another pod now, or whose
deadline passed, or that is not marked ``freed`` (a run died between its reserve and its
last eviction: lifted with an alert, and the run plans afresh, so a crash never leaves the
job waiting for the deadline), whether or not the database remembers it (a crash between
the taint and the state row is covered by the node's own annotations), and with the kill
switch on: lifting is always allowed in an executing run. A dry run reserves
nothing, so it records no reservation and no cool-down: a later run plans afresh.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from gpuscope.actions.executor_core import STOPS_RUN, Answer, ExecutorCore, StopRun, result_of
from gpuscope.actions.kube import ClusterClient, Conflict, KubeError, NotFound, Obj
from gpuscope.actions.plan import LAST_CONSOLIDATION, Step, reserve_key, steps_by_node
from gpuscope.actions.policy import Policy
from gpuscope.actions.reservation import (
    RESERVED_FOR,
    RESERVED_KEY,
    RESERVED_MEMBERS,
    RESERVED_UNTIL,
    other_taints,
    our_taints,
    reserved_goal,
    reserved_until,
    taint,
    terminating,
    tolerates,
    toleration,
)

log = logging.getLogger("gpuscope.actions.executor")
GUARDED = "(uid, resourceVersion guarded)"
LEGACY_CORDON = "gpuscope.io/cordoned-for"
LEGACY_UNTIL = "gpuscope.io/cordoned-until"


#: The state row's mark that every step of a node's plan landed (reserve, tolerate, every
#: eviction): a reservation without it was left by a run that died on the way.
FREED = "freed"
INTERRUPTED = "interrupted before its evictions finished"


class Abandon(Exception):
    """The node's plan cannot go on; its reservation is lifted."""


class NodeFreeing(ExecutorCore):
    """The consolidation half of the executor."""

    def run_consolidation(self, steps: Sequence[Step]) -> None:
        """Reserve, let the pending pod tolerate the reservation, evict; node by node."""
        self._free_nodes(steps)
        self._mark_run(steps)

    def _free_nodes(self, steps: Sequence[Step]) -> None:
        for node, group in steps_by_node(steps).items():
            try:
                if not self._free_node(node, group):
                    break
            except StopRun as exc:
                log.warning("consolidation stopped node=%s error=%s", node, exc)
                break

    def _mark_run(self, steps: Sequence[Step]) -> None:
        """The cool-down's start: an executed run that had steps."""
        if steps and not self.dry_run_for(steps[0].policy):
            row = {
                "key": LAST_CONSOLIDATION,
                "dry_run": False,
                "kind": "consolidation",
                "created_at": self.clock(),
                "due_at": None,
            }
            self.store.delete_action_state([LAST_CONSOLIDATION], dry_run=False)
            self.store.save_action_state([row], self.clock())

    def _free_node(self, node: str, group: Sequence[Step]) -> bool:
        reserve = group[0]
        dry = self.dry_run_for(reserve.policy)
        for step in group:
            held = self._held_back(step)
            if held:
                self._outcome(reserve, dry, Answer("skipped", f"{held}; {node} left alone"))
                return True
        over = self._over_rate(dry, self.clock())
        if over:
            self._outcome(reserve, dry, Answer("skipped", over))
            return False
        tolerate = next((s for s in group if s.action == "tolerate"), None)
        if tolerate is None:  # no pending pod to reserve the node for: no point freeing it
            self._outcome(reserve, dry, Answer("skipped", f"{reserve.goal} is not pending"))
            return True
        goal_pod = None
        if self.client is not None:
            goal_pod = self._goal(tolerate, dry)  # still pending? else nothing to free
            if goal_pod is None:
                return True
        if not self._reserve(reserve, dry, tolerate.uid):
            return True
        try:
            for step in group[1:]:
                if step.action == "tolerate":
                    self._tolerate(step, dry, goal_pod)
                else:
                    self._evict(step, dry)
            if not dry and self.client is not None:  # every step landed: the node is freed
                row = self._state_row(reserve, "reserved", reserve.due_at, dry=False)
                self.store.save_action_state(
                    [{**row, "uid": tolerate.uid, FREED: True}], self.clock()
                )
        except Abandon as why:
            if not dry:
                self._lift(reserve, f"plan abandoned after a {why} answer")
            if str(why) in STOPS_RUN:
                raise StopRun(str(why)) from None
        return True

    def _reserve(
        self, step: Step, dry: bool, goal_uid: str, members: Mapping[str, str] | None = None
    ) -> bool:
        goal = step.goal or ""
        if self.client is None:
            self._outcome(step, dry, Answer("would-do", "planned (no Kubernetes API)"))
            return True
        try:
            node = self.client.get_node(step.node)
        except KubeError as exc:
            self._outcome(step, dry, Answer(result_of(exc), str(exc)))
            return self._stop_if(result_of(exc), str(exc))
        if (node.get("spec") or {}).get("unschedulable"):
            note = f"{step.node} is cordoned (not by gpuscope): left alone"
            self._outcome(step, dry, Answer("skipped", note))
            return False
        if our_taints(node):
            note = f"{step.node} is reserved by gpuscope already, for {reserved_goal(node)}"
            self._outcome(step, dry, Answer("skipped", note))
            return False
        until = step.due_at.isoformat() if step.due_at else ""
        annotations = {RESERVED_FOR: goal, RESERVED_UNTIL: until}
        if members:  # a pod group's: lifted once every member is bound
            annotations[RESERVED_MEMBERS] = ",".join(sorted(members))
        change = {
            "metadata": {"annotations": annotations},
            "spec": {"taints": [*other_taints(node), taint(goal)]},
        }
        mark = taint(goal)
        what = (
            f"patch node {step.node} add taint {mark['key']}={mark['value']}:NoSchedule {GUARDED}"
        )
        answer = self._send(dry, what, lambda c: c.patch_node(node, change, "reserve", dry_run=dry))
        if not answer.ok:
            self._outcome(step, dry, answer)
            return self._stop_if(answer.result, answer.message)
        row = {**self._state_row(step, "reserved", step.due_at, dry=False), "uid": goal_uid}
        if members:
            row["members"] = dict(members)
        self._outcome(step, dry, answer, save=[] if dry else [row])
        return True

    def _stop_if(self, result: str, message: str) -> bool:
        if result in STOPS_RUN:
            raise StopRun(message)
        return False

    def _goal(self, step: Step, dry: bool) -> Obj | None:
        """The pending pod a node is freed for, read now; None (recorded) when it is not
        pending any more: gone, bound, Terminating or another pod under the name."""
        assert self.client is not None
        goal = step.goal or ""
        try:
            pod = self.client.get_pod(step.namespace, step.pod)
        except KubeError as exc:
            self._outcome(step, dry, Answer(result_of(exc), str(exc)))
            self._stop_if(result_of(exc), str(exc))
            return None
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        why = ""
        if step.uid and meta.get("uid") != step.uid:
            why = f"{goal} is another pod now (UID {meta.get('uid')}, planned {step.uid})"
        elif terminating(pod):
            why = f"{goal} is Terminating"
        elif spec.get("nodeName"):
            why = f"{goal} is bound to {spec['nodeName']} already"
        if why:
            self._outcome(step, dry, Answer("conflict" if "UID" in why else "skipped", why))
            return None
        return pod

    def _tolerate(self, step: Step, dry: bool, pod: Obj | None) -> None:
        goal = step.goal or ""
        if pod is None:  # plan only
            self._outcome(step, dry, Answer("would-do", "planned (no Kubernetes API)"))
            return
        if tolerates(pod, goal):
            self._outcome(step, dry, Answer("skipped", f"{goal} tolerates the reservation already"))
            return
        tol = toleration(goal)
        what = f"patch pod {goal} add toleration {tol['key']}={tol['value']}:NoSchedule {GUARDED}"
        answer = self._send(dry, what, lambda c: c.add_toleration(pod, tol, dry_run=dry))
        self._outcome(step, dry, answer)
        if not answer.ok:
            raise Abandon(answer.result)

    def _evict(self, step: Step, dry: bool) -> None:
        name = f"{step.namespace}/{step.pod}"
        if self.client is not None:
            try:
                pod = self.client.get_pod(step.namespace, step.pod)
            except NotFound as exc:
                self._outcome(step, dry, Answer("not-found", f"{exc}: its room is free"))
                return
            except KubeError as exc:
                self._outcome(step, dry, Answer(result_of(exc), str(exc)))
                raise Abandon(result_of(exc)) from None
            meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            if step.uid and meta.get("uid") != step.uid:
                why = f"{name} is another pod now (UID {meta.get('uid')}, planned {step.uid})"
                self._outcome(step, dry, Answer("conflict", why))
                raise Abandon("conflict")
            if terminating(pod):
                self._outcome(step, dry, Answer("skipped", f"{name} is Terminating already"))
                return
            if spec.get("nodeName") != step.node:
                self._outcome(step, dry, Answer("skipped", f"{name} is not on {step.node} now"))
                return
        what = f"evict pod {name} (uid precondition)"
        answer = self._send(
            dry, what, lambda c: c.evict_pod(step.namespace, step.pod, step.uid, dry_run=dry)
        )
        self._outcome(step, dry, answer)
        if answer.result == "not-found":
            return
        if not answer.ok:
            raise Abandon(answer.result)

    # -- lifting ----------------------------------------------------------------------------
    def _lift(self, reserve: Step, why: str, *, dry: bool = False, legacy: bool = False) -> None:
        """Remove the reservation taint (or a cordon of ours from before it) and forget the
        state row, in the audit row's transaction. Re-read and retried at once on 409; any
        other failure keeps the row for the next run (an alert at ``max_attempts``)."""
        assert self.client is not None
        step = Step(
            "uncordon" if legacy else "lift", reserve.policy, why, node=reserve.node,
            key=reserve.key, goal=reserve.goal,
        )  # fmt: skip
        for _ in range(3):
            try:
                node = self.client.get_node(step.node)
            except NotFound:
                self._forget(step, dry)
                return
            except KubeError as exc:
                self._keep(step, dry, Answer(result_of(exc), str(exc)))
                return
            annotations = (node.get("metadata") or {}).get("annotations") or {}
            if legacy:
                if LEGACY_CORDON not in annotations:
                    self._forget(step, dry)
                    return
                change: Obj = {
                    "metadata": {"annotations": {LEGACY_CORDON: None, LEGACY_UNTIL: None}},
                    "spec": {"unschedulable": None},
                }
                what = f"patch node {step.node} uncordon {GUARDED}"
            else:
                if not our_taints(node):
                    self._forget(step, dry)
                    return
                change = {
                    "metadata": {
                        "annotations": {RESERVED_FOR: None, RESERVED_UNTIL: None}
                        | ({RESERVED_MEMBERS: None} if RESERVED_MEMBERS in annotations else {})
                    },
                    "spec": {"taints": other_taints(node) or None},
                }
                what = f"patch node {step.node} remove taint {RESERVED_KEY} {GUARDED}"

            def patch(c: ClusterClient, n: Obj = node, ch: Obj = change) -> object:
                return c.patch_node(n, ch, step.action, dry_run=dry)

            answer = self._send(dry, what, patch)
            if answer.ok:
                self._outcome(step, dry, answer, delete=[] if dry else [step.key])
                return
            if answer.result == "not-found":  # the node went meanwhile: nothing to lift
                self._outcome(step, dry, answer, delete=[] if dry else [step.key])
                return
            if answer.result != "conflict":
                self._keep(step, dry, answer)
                return
        self._keep(step, dry, answer)

    def _forget(self, step: Step, dry: bool) -> None:
        """Nothing left to lift (someone lifted it, or the node is gone): no request, no
        "done"; the state row goes."""
        log.info("reservation already gone node=%s", step.node)
        if not dry:
            self.store.delete_action_state([step.key], dry_run=False)

    def _keep(self, step: Step, dry: bool, answer: Answer) -> None:
        if dry:
            self._outcome(step, dry, answer)
            return
        row = self.state(False).get(step.key) or self._state_row(step, "reserved", dry=False)
        attempts = int(row.get("attempts") or 0) + 1
        row = {**row, "key": step.key, "dry_run": False, "attempts": attempts,
               "last_error": answer.message[:500]}  # fmt: skip
        self._outcome(step, dry, answer, save=[row])
        if attempts == step.policy.max_attempts:  # lifting never stops; it alerts once
            self._alert(step, f"cannot lift the reservation of {step.node} after {attempts} "
                        f"attempts ({answer.message}); remove it by hand: kubectl taint nodes "
                        f"{step.node} gpuscope.io/reserved-for-", dry)  # fmt: skip

    def reconcile(self, policies: Iterable[Policy]) -> set[str]:
        """Lift reservations whose pod is bound, gone, Terminating or another pod now, or
        whose deadline passed (module docstring); the nodes still reserved after."""
        if self.client is None:
            return set()
        by_name = {p.name: p for p in policies}
        now, dry = self.clock(), not self.execute
        rows = self.state(False)
        try:
            nodes = {str(n["metadata"]["name"]): n for n in self.client.list_nodes()}
        except KubeError as exc:
            log.warning("reconcile: cannot list nodes error=%s", exc)
            return {str(r.get("node")) for k, r in rows.items() if k.startswith("reserve:")}
        still: set[str] = set()
        for key, row in rows.items():
            if row["kind"] == "cordon":  # left by a version before the reservation taint
                name = str(row.get("node"))
                step = self._lift_step(row, by_name, key, "a cordon of an earlier gpuscope")
                if dry:
                    still.add(name)
                else:
                    self._lift(step, step.reason, legacy=True)
        for name, node in sorted(nodes.items()):
            if not our_taints(node):
                continue
            key = reserve_key(name)
            row = rows.get(key) or {"node": name, "goal": reserved_goal(node), "policy": ""}
            why = self._lift_reason(node, row, now)
            interrupted = not why and not row.get(FREED)
            if interrupted:  # a run died between its reserve and its last eviction
                why = INTERRUPTED
            if not why:
                still.add(name)
                continue
            step = self._lift_step(row, by_name, key, why)
            self._lift(step, why, dry=dry)
            if interrupted and not dry:
                self._alert(
                    step,
                    f"the consolidation freeing {name} for {row.get('goal')} was interrupted "
                    "before its evictions finished (the run died?); its reservation is lifted "
                    "and this run plans afresh",
                    dry,
                )
            if dry:
                still.add(name)
        for key, row in rows.items():  # rows whose node has no taint of ours any more
            gone = not our_taints(nodes.get(str(row.get("node")), {}))
            if key.startswith("reserve:") and gone and not dry:
                self.store.delete_action_state([key], dry_run=False)
        return still

    @staticmethod
    def _lift_step(
        row: Mapping[str, Any], by_name: Mapping[str, Policy], key: str, why: str
    ) -> Step:
        name = str(row.get("policy") or "")
        policy = by_name.get(name) or Policy(name=name or "consolidation", type="consolidation")
        return Step(
            "reserve", policy, why, node=str(row.get("node")), key=key, goal=row.get("goal")
        )

    @staticmethod
    def _deadline_passed(node: Obj, row: Mapping[str, Any], now: datetime) -> str:
        until = reserved_until(node) or row.get("due_at")
        if until is not None and until <= now:
            return "reservation deadline passed"
        return ""

    def _lift_reason(self, node: Obj, row: Mapping[str, Any], now: datetime) -> str:
        assert self.client is not None
        why = self._deadline_passed(node, row, now)
        if why:
            return why
        goal = str(row.get("goal") or reserved_goal(node))
        if "/" not in goal:
            return f"reservation names no pod ({goal!r})"
        ns, _, name = goal.partition("/")
        try:
            pod = self.client.get_pod(ns, name)
        except NotFound:
            return f"{goal} is gone"
        except KubeError:
            return ""
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        if row.get("uid") and uid != row.get("uid"):
            return f"{goal} is another pod now"
        if terminating(pod):
            return f"{goal} is Terminating"
        bound = (pod.get("spec") or {}).get("nodeName")
        return f"{goal} is bound to {bound}" if bound else ""


__all__ = ["Abandon", "Conflict", "NodeFreeing"]
