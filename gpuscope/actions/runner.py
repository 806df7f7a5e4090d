"""One run of the policies over the store: what ``gpuscope act`` and the collector's schedule
call. Reads the inventory and runs the detectors (read-only, with each policy's
thresholds), plans the steps, and hands them to the executor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from gpuscope.actions.audit import REFUSED, ActionRecord
from gpuscope.actions.executor import Executor, Notifier
from gpuscope.actions.kube import ClusterClient
from gpuscope.actions.plan import consolidation_blocked, plan_consolidation_steps, plan_idle
from gpuscope.actions.policy import Policy
from gpuscope.analytics.allocation import records_from_inventory, state_from_records
from gpuscope.analytics.consolidation.plan import (
    goals_from_pending,
    placement_from_state,
    plan_consolidation,
)
from gpuscope.analytics.idle import run_idle
from gpuscope.analytics.runner import gpu_indices_of
from gpuscope.collector.inventory_records import PodInfo
from gpuscope.collector.store import Store
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
            steps, left_out = _consolidation_steps(policy, nodes, pods, indices, settings, at)
            run.notes.extend(f"policy {policy.name}: left out {n}" for n in left_out)
            executor.run_consolidation(steps)
    run.records = list(executor.records)
    return run


def _consolidation_steps(
    policy: Policy,
    nodes: Sequence[Any],
    pods: Sequence[PodInfo],
    indices: dict[str, list[int]],
    settings: Settings,
    at: datetime,
) -> tuple[list[Any], list[str]]:
    state = state_from_records(nodes, pods, indices)
    placed = placement_from_state(
        state,
        pods,
        at=at,
        gpu_indices=indices,
        protected_namespaces=settings.workloads.protected_namespaces,
    )
    allow = settings.actions.allowlist_namespaces
    if allow:  # allowlist mode: only pods of listed namespaces may move
        placed = [
            p
            if p.namespace in allow or not p.movable
            else replace(p, movable=False, reason_fixed="namespace not in the allowlist")
            for p in placed
        ]
    goals = goals_from_pending(pods)
    plan = plan_consolidation(
        state.nodes, placed, goals, max_evictions=policy.max_evictions_per_run
    )
    by_key = {f"{p.namespace}/{p.name}": p for p in pods}
    steps, left_out = plan_consolidation_steps(policy, plan, by_key, at)
    left_out.extend(f"{goal}: {reason}" for goal, reason in plan.unplaceable)
    return steps, left_out
