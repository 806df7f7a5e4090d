"""Pure planners: from findings, the inventory, a consolidation plan and the executor's state
to the steps of this run. No I/O; the executor (gpuscope/actions/executor.py) carries steps out.

Idle and time-limit policies walk each selected session through warn -> wait -> act:
a session with no warning gets one (``warn``, due ``warning_minutes`` later); a warned one
still selected when the warning falls due gets the policy's action; a warned one no longer
selected (it became busy, or its owner deleted it) gets ``clear-warning``. State is keyed
by the pod's UID, so a notebook restarted under the same name starts over, and a session
acted on is never acted on twice.

A failed step keeps its state with an attempt counted (``retry``: a warning that did not
land is given again; a warned session's act is tried again); ``gave-up`` rows get no more
steps. Terminating pods are never selected.

Consolidation takes the planner's plan (gpuscope/analytics/consolidation/plan.py) and turns each
target
node into ``reserve`` (a taint of gpuscope's own, so evicted pods do not land back),
``tolerate`` (the matching toleration for the pending pod it is freed for, and only it),
then ``evict`` for each pod the plan moves off it, within the per-node and per-run limits.
Only one consolidation is in flight at a time (no new one while a reservation of ours
stands) and executed runs are at least a cool-down apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpuscope.actions.policy import Policy
from gpuscope.analytics.consolidation.plan import Plan
from gpuscope.collector.cluster.inventory_records import PodInfo
from gpuscope.core.records import Finding, WorkloadKind

#: Finding kinds each idle-type policy acts on.
FINDING_KINDS = {"idle": "idle_session", "time_limit": "session_time_limit"}
LAST_CONSOLIDATION = "consolidation:last"


@dataclass(frozen=True, slots=True)
class Step:
    """One thing to do to the cluster, and why."""

    action: str
    policy: Policy
    reason: str
    namespace: str = ""
    pod: str = ""
    uid: str = ""
    node: str = ""
    gpus: float = 0.0
    finding_id: str | None = None
    #: The executor's state key this step advances.
    key: str = ""
    due_at: datetime | None = None
    goal: str | None = None
    gpu_hours_freed: float | None = None
    #: For stop-notebook: the Kubeflow Notebook that owns the pod.
    notebook: str = ""
    #: A pending pod group's plan (gpuscope/actions/group_freeing.py): its member pods
    #: (``namespace/pod`` -> UID), on every step of it; empty for a single pod's plan.
    members: tuple[tuple[str, str], ...] = ()


def idle_key(policy: Policy, pod: PodInfo) -> str:
    return f"idle:{policy.name}:{pod.namespace}/{pod.name}:{pod.uid}"


def reserve_key(node: str) -> str:
    return f"reserve:{node}"


def notebook_of(pod: PodInfo) -> str:
    """The Kubeflow Notebook that owns a pod: its ``notebook-name`` label (the controller
    sets it on the StatefulSet's pods), or a Notebook owner."""
    if pod.owner_kind == "Notebook":
        return pod.owner_name
    return pod.labels.get("notebook-name", "")


def _selected(
    policy: Policy, finding: Finding, pods: Mapping[str, PodInfo], protected: frozenset[str]
) -> PodInfo | None:
    if finding.kind != FINDING_KINDS.get(policy.type):
        return None
    ns, name = finding.subject.get("namespace", ""), finding.subject.get("pod", "")
    pod = pods.get(f"{ns}/{name}")
    if pod is None or not pod.uid or pod.node is None:
        return None  # not in the inventory (yet): nothing to check the UID against
    if pod.terminating:
        return None  # going away already
    if ns in protected or pod.protected:  # the label and annotation set pod.protected
        return None
    if pod.kind != WorkloadKind.INTERACTIVE:
        return None  # batch workloads are never idle-killed
    if not policy.covers(ns, pod.labels):
        return None
    if policy.type == "idle" and policy.idle_minutes is not None:
        return (
            pod if float(finding.evidence.get("idle_minutes", 0)) >= policy.idle_minutes else None
        )
    return pod


def plan_idle(
    policy: Policy,
    findings: Iterable[Finding],
    pods: Mapping[str, PodInfo],
    state: Mapping[str, Mapping[str, Any]],
    now: datetime,
    protected_namespaces: Iterable[str] = (),
) -> list[Step]:
    """The steps of an idle or time-limit policy this run (module docstring)."""
    protected = frozenset(protected_namespaces)
    steps: list[Step] = []
    selected: set[str] = set()
    for finding in sorted(findings, key=lambda f: f.id):
        pod = _selected(policy, finding, pods, protected)
        if pod is None:
            continue
        key = idle_key(policy, pod)
        selected.add(key)
        gpus = float(finding.evidence.get("gpus_held", 0) or 0)
        common: dict[str, Any] = {
            "policy": policy,
            "namespace": pod.namespace,
            "pod": pod.name,
            "uid": pod.uid,
            "node": pod.node or "",
            "gpus": gpus,
            "finding_id": finding.id,
            "key": key,
        }
        row = state.get(key)
        if row is None or row["kind"] == "retry":
            due = now + timedelta(minutes=policy.warning_minutes)
            steps.append(Step("warn", reason=_why(policy, finding, due), due_at=due, **common))
        elif row["kind"] == "warning" and row["due_at"] is not None and row["due_at"] <= now:
            idle_h = float(finding.evidence.get("idle_minutes", 0) or 0) / 60
            freed = round(gpus * idle_h, 4) if policy.type == "idle" else None
            if policy.type == "time_limit":
                age_h = float(finding.evidence.get("age_hours", 0) or 0)
                freed = round(gpus * max(0.0, age_h - (policy.max_session_age_hours or 0)), 4)
            steps.append(
                Step(
                    policy.action,
                    reason=_why(policy, finding, None),
                    gpu_hours_freed=freed,
                    notebook=notebook_of(pod),
                    **common,
                )
            )
    prefix = f"idle:{policy.name}:"
    for key, row in sorted(state.items()):
        if key.startswith(prefix) and key not in selected and row["kind"] in ("warning", "retry"):
            steps.append(
                Step(
                    "clear-warning",
                    policy=policy,
                    reason="no longer selected: busy again, gone, or out of the policy",
                    namespace=str(row.get("namespace", "")),
                    pod=str(row.get("pod", "")),
                    uid=str(row.get("uid", "")),
                    node=str(row.get("node", "")),
                    key=key,
                )
            )
    return steps


def _why(policy: Policy, finding: Finding, due: datetime | None) -> str:
    ev = finding.evidence
    if policy.type == "time_limit":
        what = (
            f"session running {ev.get('age_hours')} h, over the "
            f"{policy.max_session_age_hours:g} h limit"
        )
    else:
        what = (
            f"GPU idle {ev.get('idle_minutes')} min (utilization under "
            f"{ev.get('threshold')} since {ev.get('idle_since')})"
        )
    if due is not None:
        return f"{what}; policy {policy.name} will {policy.action} it at {due.isoformat()}"
    return f"{what}; warned, and still so when the warning fell due"


def consolidation_blocked(
    policy: Policy,
    state: Mapping[str, Mapping[str, Any]],
    now: datetime,
    reserved: Iterable[str] = (),
) -> str:
    """Why no new consolidation may start now ("" when one may): a reservation of ours
    stands (``reserved``: the nodes carrying our taint; ``state``: the executed runs'
    state), or the cool-down since the last executed run has not passed."""
    nodes = sorted(
        {*reserved, *(k.partition(":")[2] for k in state if k.startswith(("reserve:", "cordon:")))}
    )
    if nodes:
        return f"a consolidation is in flight ({', '.join(nodes)} reserved)"
    last = state.get(LAST_CONSOLIDATION)
    if last is not None:
        ends = last["created_at"] + timedelta(minutes=policy.cooldown_minutes)
        if ends > now:
            return f"cool-down until {ends.isoformat()}"
    return ""


def plan_consolidation_steps(
    policy: Policy,
    plan: Plan,
    pods: Mapping[str, PodInfo],
    now: datetime,
) -> tuple[list[Step], list[str]]:
    """Steps for the plan's target nodes within the limits, and why others were left out."""
    by_node: dict[str, list[str]] = {}
    for move in plan.moves:
        by_node.setdefault(move.from_node, []).append(f"{move.namespace}/{move.pod}")
    steps: list[Step] = []
    left_out: list[str] = []
    evictions = 0
    seen: set[str] = set()
    for goal, node in plan.targets:
        if node in seen:
            continue
        seen.add(node)
        victims = sorted(set(by_node.get(node, [])))
        if not victims:
            continue  # it fits there now: the scheduler needs no help
        if len(victims) > policy.max_evictions_per_node:
            left_out.append(
                f"{goal} on {node}: needs {len(victims)} evictions, over "
                f"max_evictions_per_node={policy.max_evictions_per_node}"
            )
            continue
        if evictions + len(victims) > policy.max_evictions_per_run:
            left_out.append(
                f"{goal} on {node}: over max_evictions_per_run={policy.max_evictions_per_run}"
            )
            continue
        evictions += len(victims)
        deadline = now + timedelta(minutes=policy.cordon_minutes)
        reason = f"free {node} for {goal} ({len(victims)} eviction(s))"
        steps.append(
            Step(
                "reserve",
                policy,
                reason,
                node=node,
                key=reserve_key(node),
                due_at=deadline,
                goal=goal,
            )
        )
        waiting = pods.get(goal)
        if waiting is not None and waiting.node is None:
            steps.append(
                Step(
                    "tolerate",
                    policy,
                    f"let {goal}, and only it, schedule onto {node} reserved for it",
                    namespace=waiting.namespace,
                    pod=waiting.name,
                    uid=waiting.uid,
                    node=node,
                    gpus=float(waiting.gpu_request),
                    goal=goal,
                    key=reserve_key(node),
                )
            )
        steps += [evict_step(policy, reason, v, pods, node, goal) for v in victims]
    return steps, left_out


def evict_step(
    policy: Policy,
    reason: str,
    victim: str,
    pods: Mapping[str, PodInfo],
    node: str,
    goal: str,
    members: tuple[tuple[str, str], ...] = (),
) -> Step:
    """The eviction of ``victim`` (``namespace/name``) from ``node`` for ``goal`` (a pod,
    or a pod group with its ``members``), under the node's reservation."""
    info = pods.get(victim)
    ns, _, name = victim.partition("/")
    return Step(
        "evict",
        policy,
        reason,
        namespace=ns,
        pod=name,
        uid=info.uid if info is not None else "",
        node=node,
        gpus=float(info.gpu_request) if info is not None else 0.0,
        goal=goal,
        key=reserve_key(node),
        members=members,
    )


def steps_by_node(steps: Sequence[Step]) -> dict[str, list[Step]]:
    """Consolidation steps grouped by the node they free, in order."""
    out: dict[str, list[Step]] = {}
    for step in steps:
        out.setdefault(step.node, []).append(step)
    return out
