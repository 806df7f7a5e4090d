"""One run of the policies over the store: what ``gpuscope act`` and the collector's schedule
call. Reads the inventory and runs the detectors (read-only, with each policy's
thresholds), plans the steps, and hands them to the executor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuscope.actions.audit import REFUSED, ActionRecord
from gpuscope.actions.disruption import (
    Budget,
    blocked_by_budgets,
    budget_from_json,
    stored_budgets,
)
from gpuscope.actions.executor import Executor, Notifier
from gpuscope.actions.group_plan import group_steps
from gpuscope.actions.kube import ClusterClient, KubeError
from gpuscope.actions.node_freeing import FREED
from gpuscope.actions.plan import Step, consolidation_blocked, plan_consolidation_steps, plan_idle
from gpuscope.actions.policy import Policy
from gpuscope.actions.reservation import RESERVED_KEY
from gpuscope.analytics.consolidation.budgets import budget_spend
from gpuscope.analytics.consolidation.gangs import GangOutcome, plan_with_gangs
from gpuscope.analytics.consolidation.model import Placed
from gpuscope.analytics.consolidation.plan import (
    Plan,
    goals_from_pending,
    placement_from_state,
    plan_consolidation,
)
from gpuscope.analytics.detectors.idle import run_idle
from gpuscope.analytics.domains.topology_gangs import gang_goals
from gpuscope.analytics.placement.allocation import state_from_records
from gpuscope.analytics.placement.allocation_sources import records_from_inventory
from gpuscope.analytics.runner import gpu_indices_of
from gpuscope.collector.cluster.inventory_records import PodInfo
from gpuscope.collector.storage.store import Store
from gpuscope.core.records import Finding
from gpuscope.core.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class ActRun:
    """What one run did: the audit records, and the notes on what it left alone."""

    records: list[ActionRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dry_run: bool = True

    @property
    def refused(self) -> list[ActionRecord]:
        """Steps the API server refused or that failed (``gpuscope act`` exits 3)."""
        return [r for r in self.records if r.result in REFUSED]

    def as_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "ok": not self.refused,
            "refused_or_failed": len(self.refused),
            "actions": [r.as_record() for r in self.records],
            "notes": list(self.notes),
        }


def _idle_findings(
    store: Store, policy: Policy, settings: Settings, at: datetime, cache: dict[Any, list[Finding]]
) -> list[Finding]:
    analytics = settings.analytics
    changes: dict[str, Any] = {}
    if policy.idle_utilization_below is not None:
        changes["idle_utilization_below"] = policy.idle_utilization_below
    if policy.max_session_age_hours is not None:
        changes["max_session_age_hours"] = policy.max_session_age_hours
    key = tuple(sorted(changes.items()))
    if key not in cache:
        tuned = analytics.model_copy(update=changes)
        result = run_idle(
            store,
            at,
            tuned,
            settings.workloads,
            persist=False,
            scrape_interval_s=settings.collector.scrape_interval_seconds,
        )
        cache[key] = list(result.findings)
    return cache[key]


def run_policies(
    store: Store,
    policies: Sequence[Policy],
    settings: Settings,
    *,
    client: ClusterClient | None,
    execute: bool,
    at: datetime | None = None,
    notifier: Notifier | None = None,
    clock: Callable[[], datetime] | None = None,
) -> ActRun:
    """Run every policy once at ``at`` (default now): reconcile, plan, carry out."""
    at = at or datetime.now(UTC)
    executor = Executor(
        store=store,
        client=client,
        settings=settings.actions,
        protected_namespaces=frozenset(settings.workloads.protected_namespaces),
        execute=execute,
        notifier=notifier,
        clock=clock or (lambda: at),
    )
    run = ActRun(dry_run=not execute or settings.actions.kill_switch)
    if settings.actions.kill_switch and execute:
        run.notes.append("actions.kill_switch is on: everything runs as a dry run")
    reserved = executor.reconcile(policies)
    cur = store.cursor()
    try:
        nodes, pods = records_from_inventory(cur)
        indices = gpu_indices_of(cur)
    finally:
        cur.close()
    by_key = {f"{p.namespace}/{p.name}": p for p in pods}
    cache: dict[Any, list[Finding]] = {}
    for policy in policies:
        dry = executor.dry_run_for(policy)
        if execute and policy.dry_run:
            run.notes.append(f"policy {policy.name} says dry_run: true, so it only plans")
        if policy.type in ("idle", "time_limit"):
            findings = _idle_findings(store, policy, settings, at, cache)
            steps = plan_idle(
                policy,
                findings,
                by_key,
                executor.state(dry),
                at,
                settings.workloads.protected_namespaces,
            )
            executor.run_idle(steps)
        else:
            why = consolidation_blocked(policy, executor.state(False), at, reserved)
            if why:
                run.notes.append(f"policy {policy.name}: no new consolidation: {why}")
                continue
            budgets = _budgets(client, run.notes, store)
            steps, left_out = _consolidation_steps(
                policy, nodes, pods, indices, settings, at, budgets
            )
            run.notes.extend(f"policy {policy.name}: left out {n}" for n in left_out)
            executor.run_consolidation(steps)
    run.records = list(executor.records)
    return run


def lift_when_bound(
    store: Store,
    policies: Sequence[Policy],
    settings: Settings,
    *,
    client: ClusterClient | None,
    at: datetime,
    notifier: Notifier | None = None,
) -> list[ActionRecord]:
    """Between the policies' runs (the collector calls this each scrape interval): when
    the inventory shows the pod a reservation waits for bound (for a pod group: every
    member), reconcile at once, so the taint closing the node's other free GPUs is lifted
    minutes, not a run's interval, after the bind. The same check lifts, within one such
    cycle, a reservation whose deadline passed or whose run died before it finished (not
    marked ``freed`` a cycle after it was made, or a taint of ours with no state row): a
    crash at any step leaves no reservation behind for longer than a cycle. Nothing is
    sent while none of these holds (:func:`_reconcile_now`)."""
    if client is None:
        return []
    rows = store.action_state(dry_run=False)
    reserves = [r for k, r in rows.items() if k.startswith("reserve:")]
    cur = store.cursor()
    try:
        nodes, pods = records_from_inventory(cur)
    finally:
        cur.close()
    lease = timedelta(seconds=settings.collector.scrape_interval_seconds)
    if not _reconcile_now(reserves, nodes, pods, at, lease):
        return []
    return _reconcile(store, policies, settings, client, at, notifier)


def check_reservations(
    store: Store,
    policies: Sequence[Policy],
    settings: Settings,
    *,
    client: ClusterClient | None,
    at: datetime,
    notifier: Notifier | None = None,
) -> list[ActionRecord]:
    """The reservations' check of a policies' run (:meth:`Executor.reconcile`) alone, for
    a collector that starts: a reservation a run left behind (the node tainted for a pending
    job, its run interrupted, its pod bound or gone, its deadline passed) is lifted now,
    not at the first run of the policies, up to their interval later (issue 38). Lifting
    only, as :func:`lift_when_bound`; nothing is planned or evicted."""
    if client is None:
        return []
    return _reconcile(store, policies, settings, client, at, notifier)


def _reconcile(
    store: Store,
    policies: Sequence[Policy],
    settings: Settings,
    client: ClusterClient,
    at: datetime,
    notifier: Notifier | None,
) -> list[ActionRecord]:
    """The executor's reconcile alone: lifting only, allowed with the kill switch on
    (node_freeing.py); nothing is planned or evicted."""
    executor = Executor(
        store=store,
        client=client,
        settings=settings.actions,
        protected_namespaces=frozenset(settings.workloads.protected_namespaces),
        execute=True,  # lifting only: allowed with the kill switch on (node_freeing.py)
        notifier=notifier,
        clock=lambda: at,
    )
    executor.reconcile(policies)
    return list(executor.records)


def _utc(at: datetime | None) -> datetime | None:
    """A stored time (naive UTC in the database) as an aware one."""
    return at.replace(tzinfo=UTC) if at is not None and at.tzinfo is None else at


def _reconcile_now(
    reserves: Sequence[Mapping[str, Any]],
    nodes: Sequence[Any],
    pods: Sequence[PodInfo],
    at: datetime,
    lease: timedelta,
) -> bool:
    """Whether a reservation may be due for lifting, read from the state rows and the
    inventory alone (nothing is sent otherwise): its pod, or every member of its pod group,
    is bound, or a member is gone; its deadline passed; it is not marked ``freed`` a
    collector cycle (``lease``) after it was made (its run died on the way); or a node
    carries a reservation taint of ours with no state row (the run died between the taint
    and the row)."""
    where = {f"{p.namespace}/{p.name}": p.node for p in pods}
    for row in reserves:
        members = dict(row.get("members") or {})
        if members:
            if any(m not in where for m in members) or all(where[m] for m in members):
                return True
        elif where.get(str(row.get("goal"))):
            return True
        due, made = _utc(row.get("due_at")), _utc(row.get("created_at"))
        if due is not None and due <= at:
            return True
        if not row.get(FREED) and made is not None and made + lease <= at:
            return True
    rowed = {str(r.get("node")) for r in reserves}
    prefix = f"{RESERVED_KEY}="
    return any(n.name not in rowed and any(t.startswith(prefix) for t in n.taints) for n in nodes)


def _budgets(client: ClusterClient | None, notes: list[str], store: Store) -> list[Budget]:
    """The cluster's PodDisruptionBudgets, read now; without a Kubernetes API, or when the
    list is refused, the ones the collector's inventory stored last (a note says so). With
    neither, the plan goes on without them: the Eviction API still refuses a protected
    victim, and that plan is then abandoned and lifted."""
    if client is not None:
        try:
            return [budget_from_json(o) for o in client.list_pdbs()]
        except KubeError as exc:
            why = f"PodDisruptionBudgets not read ({exc})"
    else:
        why = "no Kubernetes API to read PodDisruptionBudgets from"
    cur = store.cursor()
    try:
        stored = stored_budgets(cur)
    finally:
        cur.close()
    if stored:
        notes.append(f"{why}: planned with the {len(stored)} the inventory stored")
    elif client is not None:
        notes.append(f"{why}: planned without them")
    return stored


def hold(p: Placed, why: str) -> Placed:
    """``p`` kept in place, for ``why``."""
    return replace(p, movable=False, reason_fixed=why)


def pdb_blocked_plans(plan: Plan, blocked: Mapping[str, str]) -> list[str]:
    """One line per planned eviction a budget forbids: which budget blocked which plan
    (the goal, the node it was to free, the victim)."""
    goals_of: dict[str, list[str]] = {}
    for goal, node in plan.targets:
        goals_of.setdefault(node, []).append(goal)
    lines = []
    for move in plan.moves:
        key = f"{move.namespace}/{move.pod}"
        if key in blocked:
            goals = ", ".join(sorted(set(goals_of.get(move.from_node, [])))) or "?"
            lines.append(
                f"plan for {goals} on {move.from_node} blocked: evicting {key} is refused: "
                f"{blocked[key]}; planned again without moving it"
            )
    return lines


def _group_steps(
    policy: Policy,
    plan: Plan,
    outcomes: Sequence[GangOutcome],
    pods: Mapping[str, PodInfo],
    at: datetime,
) -> tuple[list[Step], list[str]]:
    """Each pending pod group's steps (gpuscope/actions/group_plan.py), within the run's
    eviction limit, and why any was left out."""
    steps: list[Step] = []
    notes: list[str] = []
    for outcome in outcomes:
        spent = sum(1 for s in steps if s.action == "evict")
        mine, why = group_steps(policy, plan, outcome, pods, at, spent)
        steps.extend(mine)
        if why:
            notes.append(why)
    return steps, notes


def _consolidation_steps(
    policy: Policy,
    nodes: Sequence[Any],
    pods: Sequence[PodInfo],
    indices: dict[str, list[int]],
    settings: Settings,
    at: datetime,
    budgets: Sequence[Budget] = (),
) -> tuple[list[Any], list[str]]:
    state = state_from_records(nodes, pods, indices)
    # the pods a budget keeps in place altogether are planned with first, then held and
    # the plan made again, so the notes say which budget blocked which plan
    blocked = blocked_by_budgets(budgets, pods)
    spend = {k: v for k, v in budget_spend(budgets, pods).items() if k not in blocked}
    placed = placement_from_state(
        state,
        pods,
        at=at,
        gpu_indices=indices,
        protected_namespaces=settings.workloads.protected_namespaces,
        # each budget's disruptionsAllowed is spent across the whole plan, as the Eviction
        # API's checkAndDecrement spends it (consolidation/budgets.py)
        pdb_spend=spend,
    )
    allow = settings.actions.allowlist_namespaces
    if allow:  # allowlist mode: only pods of listed namespaces may move
        outside = "namespace not in the allowlist"
        placed = [p if p.namespace in allow or not p.movable else hold(p, outside) for p in placed]
    # a pending pod group starts whole, inside one domain of its level, or not at all: it
    # is planned whole (consolidation/gangs.py) and carried out whole (group_freeing.py);
    # its pods are no goals of their own
    gangs = gang_goals(nodes, pods, None, settings.analytics.topology_labels)
    members = {m for g in gangs for m in g.members}
    goals = [g for g in goals_from_pending(pods) if g.label not in members]

    def make(placed: Sequence[Placed]) -> tuple[Plan, list[GangOutcome]]:
        if gangs:
            return plan_with_gangs(
                state.nodes, placed, goals, gangs, max_evictions=policy.max_evictions_per_run
            )
        plan = plan_consolidation(
            state.nodes, placed, goals, max_evictions=policy.max_evictions_per_run
        )
        return plan, []

    plan, outcomes = make(placed)
    pdb_notes = pdb_blocked_plans(plan, blocked)
    if pdb_notes:  # plan again with those pods held in place: another node may do
        placed = [hold(p, blocked[p.key]) if p.key in blocked and p.movable else p for p in placed]
        plan, outcomes = make(placed)
    by_key = {f"{p.namespace}/{p.name}": p for p in pods}
    group_steps_, left_out = _group_steps(policy, plan, outcomes, by_key, at)
    taken = {s.node for s in group_steps_ if s.action == "reserve"}
    groups = {o.gang.goal.name for o in outcomes}
    singles = replace(
        plan, targets=[(g, n) for g, n in plan.targets if g not in groups and n not in taken]
    )
    spent = sum(1 for s in group_steps_ if s.action == "evict")
    rest = policy.model_copy(update={"max_evictions_per_run": policy.max_evictions_per_run - spent})
    steps, single_left_out = plan_consolidation_steps(rest, singles, by_key, at)
    steps = [*group_steps_, *steps]
    left_out = [*pdb_notes, *left_out, *single_left_out]
    left_out.extend(f"{goal}: {reason}" for goal, reason in plan.unplaceable)
    return steps, left_out
