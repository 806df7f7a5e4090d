"""Carrying out a pending pod group's plan whole: reserve the domain's nodes for every
member, evict, lift once the whole group is bound.

A group's steps (gpuscope/actions/group_plan.py) are one unit:

1. every member is read: all must still be pending, as planned (same UID, not bound, not
   Terminating); otherwise nothing is done (a group whose member started, or went, is not
   the group planned for);
2. ``reserve`` each node the plan puts a member on: the taint
   ``gpuscope.io/reserved-for=<group>:NoSchedule`` (one value for the whole group) with
   the annotations naming the group, its members (``gpuscope.io/reserved-members``) and the
   deadline. A node cordoned or reserved already, or any refusal, abandons the plan;
3. ``tolerate``: every member gets the group's one toleration;
4. ``evict`` each victim, PodDisruptionBudgets honoured: the plan spends no budget beyond
   its ``disruptionsAllowed`` (consolidation/budgets.py), and a 429 abandons the plan;
5. once every step landed, each node's state row is marked ``freed``.

An abandoned plan lifts every reservation it made, at once. A reservation of a group is
lifted (:meth:`GroupFreeing._lift_reason`) once **every** member is bound (a member bound
alone keeps the others' room), or when a member is gone, Terminating or another pod (the
plan is abandoned), or at the deadline, or when its run died before marking it ``freed``:
the next run lifts it, and between runs the collector does within one scrape interval
(:func:`gpuscope.actions.runner.lift_when_bound`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from gpuscope.actions.executor_core import STOPS_RUN, Answer, StopRun
from gpuscope.actions.group_plan import split_groups
from gpuscope.actions.kube import KubeError, NotFound, Obj
from gpuscope.actions.node_freeing import FREED, Abandon, NodeFreeing
from gpuscope.actions.plan import Step
from gpuscope.actions.reservation import reserved_members, terminating

log = logging.getLogger("gpuscope.actions.executor")


class GroupFreeing(NodeFreeing):
    """Consolidation for single pods (:class:`NodeFreeing`) and for pod groups."""

    def run_consolidation(self, steps: Sequence[Step]) -> None:
        """Each pod group's plan whole, then the single pods' plans node by node."""
        single, groups = split_groups(steps)
        stopped = False
        for goal, group in groups.items():
            try:
                if not self._free_group(goal, group):
                    stopped = True
                    break
            except StopRun as exc:
                log.warning("consolidation stopped group=%s error=%s", goal, exc)
                stopped = True
                break
        if not stopped:
            self._free_nodes(single)
        self._mark_run(steps)

    def _free_group(self, goal: str, group: Sequence[Step]) -> bool:
        reserves = [s for s in group if s.action == "reserve"]
        tolerates = [s for s in group if s.action == "tolerate"]
        evicts = [s for s in group if s.action == "evict"]
        first = reserves[0]
        dry = self.dry_run_for(first.policy)
        for step in group:
            held = self._held_back(step)
            if held:
                self._outcome(first, dry, Answer("skipped", f"{held}; pod group {goal} left alone"))
                return True
        over = self._over_rate(dry, self.clock())
        if over:
            self._outcome(first, dry, Answer("skipped", over))
            return False
        pods: dict[str, Obj | None] = {}
        if self.client is not None:
            for step in tolerates:  # every member still pending, as planned
                pod = self._goal(step, dry)
                if pod is None:
                    return True
                pods[step.pod] = pod
        made: list[Step] = []
        try:
            for step in reserves:
                if not self._reserve(step, dry, "", members=dict(step.members)):
                    raise Abandon("skipped")
                made.append(step)
            for step in tolerates:
                self._tolerate(step, dry, pods.get(step.pod))
            for step in evicts:
                self._evict(step, dry)
        except (Abandon, StopRun) as why:
            if not dry and self.client is not None:
                for step in made:
                    self._lift(step, f"pod group plan abandoned after a {why} answer")
            if isinstance(why, StopRun):
                raise
            if str(why) in STOPS_RUN:
                raise StopRun(str(why)) from None
            return True
        if not dry and self.client is not None:  # every step landed: the domain is freed
            rows = [
                {**self._state_row(s, "reserved", s.due_at, dry=False), "uid": "",
                 "members": dict(s.members), FREED: True}
                for s in reserves
            ]  # fmt: skip
            self.store.save_action_state(rows, self.clock())
        return True

    def _lift_reason(self, node: Obj, row: Mapping[str, Any], now: datetime) -> str:
        members = dict(row.get("members") or {}) or {m: "" for m in reserved_members(node)}
        if not members:
            return super()._lift_reason(node, row, now)
        why = self._deadline_passed(node, row, now)
        if why:
            return why
        assert self.client is not None
        goal = str(row.get("goal") or "")
        bound = 0
        for key, uid in sorted(members.items()):
            ns, _, name = key.partition("/")
            try:
                pod = self.client.get_pod(ns, name)
            except NotFound:
                return f"pod group {goal}: member {key} is gone"
            except KubeError:
                return ""
            if uid and str((pod.get("metadata") or {}).get("uid", "")) != uid:
                return f"pod group {goal}: member {key} is another pod now"
            if terminating(pod):
                return f"pod group {goal}: member {key} is Terminating"
            bound += bool((pod.get("spec") or {}).get("nodeName"))
        if bound == len(members):
            return f"pod group {goal}: all {bound} pods are bound"
        return ""


__all__ = ["GroupFreeing"]
