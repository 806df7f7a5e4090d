"""Consolidation steps: free a node for a pending job without it filling up again.

Cordon the node (state written first, so a crash is undone), let only the pending job
tolerate the cordon, evict the planned pods through the Eviction API, and lift the cordon as
soon as the job is bound or gone, or its deadline passes (:meth:`NodeFreeing.reconcile`,
at the start of every run). A PodDisruptionBudget's 429 lifts the cordon at once; any other
unexpected answer stops the run, and the cordon is lifted too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from actions.executor_core import (
    CORDON_ANNOTATION,
    CORDON_UNTIL_ANNOTATION,
    ExecutorCore,
    StopRun,
)
from actions.kube import ClusterClient, DisruptionBlocked, KubeError, NotFound
from actions.plan import LAST_CONSOLIDATION, Step, steps_by_node
from actions.policy import Policy

log = logging.getLogger("actions.executor")


class NodeFreeing(ExecutorCore):
    """The consolidation half of the executor."""

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
        over = self._over_rate(dry, self.clock())
        if over:
            self._record(cordon, dry, "skipped", over)
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
