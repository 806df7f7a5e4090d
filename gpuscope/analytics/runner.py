"""Run detectors: load their inputs from the store (or snapshot files), collect analyses.

The only place in analytics that touches I/O; the detectors themselves are pure functions
of what this module hands them. Used by ``gpuscope analyze`` and the collector's schedule.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from gpuscope.analytics.base import Analysis
from gpuscope.collector.cluster.pdb_records import blocked_by_budgets, budgets_of, stored_budgets
from gpuscope.collector.storage.held_gpus import with_held_gpus
from gpuscope.collector.storage.store import Store, utc
from gpuscope.core.errors import UserError
from gpuscope.core.kube_objects import ObjectSet
from gpuscope.core.settings import Settings
from gpuscope.core.timefmt import api_times, rfc3339

if TYPE_CHECKING:
    from gpuscope.analytics.inventory import InventoryReads

log = logging.getLogger(__name__)

DETECTORS: tuple[str, ...] = ("idle", "fragmentation", "quota", "bandwidth", "topology")
#: Analyses that plan rather than detect: run on demand, not on the schedule.
PLANNERS: tuple[str, ...] = ("consolidation",)


#: What a run of DETECTORS imports on first use (run_on_store and topology_from_store
#: import lazily, so that the CLI's other commands start without them).
SCHEDULED_MODULES: tuple[str, ...] = (
    "gpuscope.analytics.detectors.bandwidth",
    "gpuscope.analytics.detectors.idle",
    "gpuscope.analytics.inventory",
    "gpuscope.analytics.placement.allocation",
    "gpuscope.analytics.placement.fragmentation",
    "gpuscope.analytics.queueing.quota",
    "gpuscope.analytics.domains.topology_inputs",
)


def load_scheduled() -> None:
    """Import what a scheduled run of :data:`DETECTORS` uses (polars, pyarrow.compute, the
    detectors): ~0.6 s of CPU once. The collector's service calls it as it starts, so its
    first analytics run costs what every later one does (issue 39)."""
    for name in SCHEDULED_MODULES:
        importlib.import_module(name)


def run_on_store(
    store: Store,
    at: datetime,
    settings: Settings,
    which: Sequence[str],
    *,
    persist: bool,
    record: bool = True,
    newest: dict[datetime, str | None] | None = None,
    inventory: InventoryReads | None = None,
) -> dict[str, Analysis]:
    """Run the named detectors over the store as of ``at``.

    ``persist`` lets incremental detectors keep their state in the store (the collector);
    the CLI passes False and so never writes to a database it analyses. With ``persist``,
    ``record=False`` leaves storing the findings to the caller (the collector's analytics
    job stores every detector's in one transaction). ``newest``: the ``data_until`` of
    the analyses that do not state their own, by ``at``, read once and kept there for the
    next call (the collector's analytics job runs its detectors one call each, all as of
    one ``at``: one read of :func:`newest_data` a run, not one a detector, issue 39).
    ``inventory``: the inventory read at ``at``, kept for the next call likewise (the
    fragmentation, quota and topology detectors read the same state).
    """
    from gpuscope.analytics.detectors.bandwidth import run_bandwidth
    from gpuscope.analytics.detectors.idle import run_idle
    from gpuscope.analytics.inventory import InventoryReads
    from gpuscope.analytics.placement.allocation import state_from_records
    from gpuscope.analytics.placement.fragmentation import analyze_fragmentation
    from gpuscope.analytics.queueing.quota import run_quota

    out: dict[str, Analysis] = {}
    a = settings.analytics
    inventory = inventory if inventory is not None else InventoryReads()
    for name in which:
        cur = store.cursor()
        try:
            if name == "idle":
                out[name] = run_idle(
                    store, at, a, settings.workloads, persist=persist,
                    scrape_interval_s=settings.collector.scrape_interval_seconds, record=record,
                )  # fmt: skip
            elif name == "fragmentation":
                # the inventory state valid at `at` (not the latest: an analysis of the
                # past must not present today's allocation as then)
                found = inventory.analysis(cur, utc(at), a)
                if found is None:
                    found = analyze_fragmentation(state_from_records([], []), at=at, settings=a)
                out[name] = found
            elif name == "consolidation":
                out[name] = _consolidation_from_store(cur, at, settings)
            elif name == "quota":
                out[name] = run_quota(cur, at, a, inventory=inventory)
            elif name == "bandwidth":
                out[name] = run_bandwidth(cur, at, a)
            elif name == "topology":
                out[name] = topology_from_store(cur, at, settings, inventory=inventory)
            else:
                raise UserError(f"unknown analysis {name!r}")
            # the data-age rule: every analysis states how far its data reaches
            if "data_until" not in out[name].summary:
                out[name].summary["data_until"] = _data_until(cur, at, newest)
        finally:
            cur.close()
    return out


def _data_until(cur: Any, at: datetime, memo: dict[datetime, str | None] | None) -> str | None:
    if memo is not None and at in memo:
        return memo[at]
    newest = newest_data(cur, at)
    until = newest.isoformat() if newest else None
    if memo is not None:
        memo[at] = until
    return until


#: The newest data the store holds: the last sample of any series, the last inventory
#: change (the inventory is recorded as versions, so an unchanged one adds nothing).
#: ``series.last_seen`` lags the newest sample by up to LAST_SEEN_LAG_S between the
#: writer's folds (collector/storage/writer_log.py): the samples after its newest value
#: (read first and bound as a constant, so that DuckDB skips the row groups before it by
#: their min/max statistics) have the last word.
NEWEST_DATA = """
SELECT greatest(CAST($seen AS TIMESTAMP),
                (SELECT max(ts) FROM samples WHERE ts > $seen),
                (SELECT max(valid_from) FROM inventory_nodes),
                (SELECT max(valid_from) FROM inventory_pods))
"""
NEWEST_SEEN = "SELECT max(last_seen) FROM series"


def newest_data(con: Any, at: datetime | None = None) -> datetime | None:
    """When the store's data ends, as of ``at`` (data after ``at`` means it reaches ``at``);
    None for an empty store."""
    seen = con.execute(NEWEST_SEEN).fetchone()
    row = con.execute(NEWEST_DATA, {"seen": seen[0] if seen else None}).fetchone()
    newest = row[0] if row else None
    if not isinstance(newest, datetime):
        return None
    return min(newest, utc(at)) if at is not None else newest


#: Data older than this many scrape intervals (and at least STALE_MIN) is not current.
STALE_INTERVALS = 5
STALE_MIN = timedelta(minutes=2)


def analysis_time(
    newest: datetime | None, now: datetime, scrape_interval_s: float
) -> tuple[datetime, str | None]:
    """The data-age rule of ``gpuscope analyze`` without ``--at``: analyse at ``now`` when
    the data is current, else at the newest data (idle sessions and hot links are judged
    where the data ends, not 13 h later with nothing left to see), with a one-line note
    saying so. Pure: the caller reads ``newest`` and the clock."""
    now = utc(now)
    if newest is None:
        return now, None
    age = now - newest
    if age <= max(STALE_MIN, timedelta(seconds=STALE_INTERVALS * scrape_interval_s)):
        return now, None
    hours = age.total_seconds() / 3600
    note = (
        f"the newest data is from {newest.isoformat(timespec='seconds')}Z, {hours:.1f} h ago: "
        "analysing as of then (give --at to choose another time)"
    )
    return newest, note


#: Which GPUs (indices on their node) each pod holds now, as the agents report it: the
#: inventory knows a fractional pod's share but not which GPU it landed on (a fleet
#: summary's `gpu` is a GPU count, not an index: left out).
GPU_INDICES = with_held_gpus("""
SELECT namespace || '/' || pod AS key, list(DISTINCT CAST(gpu AS INTEGER)) AS gpus
FROM workload_intervals
WHERE end_ts IS NULL AND TRY_CAST(gpu AS INTEGER) IS NOT NULL AND NOT {summary_row}
GROUP BY ALL
""")


def gpu_indices_of(con: Any) -> dict[str, list[int]]:
    return {key: sorted(gpus) for key, gpus in con.execute(GPU_INDICES).fetchall()}


def _consolidation_from_store(cur: Any, at: datetime, settings: Settings) -> Analysis:
    from gpuscope.analytics.placement.allocation_sources import records_from_inventory

    nodes, pods = records_from_inventory(cur)
    # the budgets the inventory stored: a victim whose budget allows no disruption stays
    return _consolidation(nodes, pods, gpu_indices_of(cur), None, stored_budgets(cur), at, settings)


def _consolidation(
    nodes: Sequence[Any],
    pods: Sequence[Any],
    indices: Any,
    objects: ObjectSet | None,
    budgets: Sequence[Any],
    at: datetime,
    settings: Settings,
) -> Analysis:
    """The consolidation plan from records, from the store or from files alike: pending pod
    groups planned whole inside one domain of their level, pods the budgets keep in place
    held, and ``pdb_blocked`` in the summary."""
    from gpuscope.analytics.consolidation.budgets import budget_spend
    from gpuscope.analytics.consolidation.plan import analyze_consolidation
    from gpuscope.analytics.domains.topology_gangs import gang_goals
    from gpuscope.analytics.placement.allocation import state_from_records

    blocked = blocked_by_budgets(budgets, pods)
    return _with_blocked(
        analyze_consolidation(
            state_from_records(nodes, pods, indices),
            pods,
            at=at,
            settings=settings.analytics,
            gpu_indices=indices,
            protected_namespaces=settings.workloads.protected_namespaces,
            gangs=gang_goals(nodes, pods, objects, settings.analytics.topology_labels),
            pdb_blocked=frozenset(blocked),
            # a budget's disruptions are spent across the whole plan (checkAndDecrement)
            pdb_spend=budget_spend(budgets, pods),
        ),
        blocked,
    )


def _with_blocked(plan: Analysis, blocked: dict[str, str]) -> Analysis:
    """The plan with ``pdb_blocked`` in its summary: each pod a PodDisruptionBudget keeps in
    place (``namespace/pod``) and why, naming the budget."""
    plan.summary["pdb_blocked"] = dict(sorted(blocked.items()))
    return plan


def topology_from_store(
    cur: Any,
    at: datetime,
    settings: Settings,
    objects: Any = None,
    *,
    inventory: InventoryReads | None = None,
) -> Analysis:
    """Topology of the inventory state valid at ``at``, levels from the node labels unless
    ``objects`` (an ObjectSet: the store keeps no Topology objects, ``gpuscope analyze
    topology --objects`` reads them from files) define them; ``inventory``: a run's reads."""
    from gpuscope.analytics.domains.topology_inputs import topology_analysis
    from gpuscope.analytics.inventory import InventoryReads
    from gpuscope.core.kube_objects import ObjectSet

    nodes, pods, indices = (inventory or InventoryReads()).records(cur, utc(at))
    return topology_analysis(
        nodes, pods, objects or ObjectSet(), at=at, settings=settings, gpu_indices=indices
    )


def run_on_snapshot(
    nodes: Path,
    pods: Path,
    at: datetime,
    settings: Settings,
    what: str = "fragmentation",
    *,
    objects: ObjectSet | None = None,
) -> Analysis:
    """Fragmentation, a consolidation plan or the quota view from files: kubectl JSON
    (``get nodes/pods -o json``; pending pods are the goals), or for fragmentation the
    Alibaba trace's CSVs (the pods are then the workload on an empty cluster).

    ``objects`` (``--objects`` files: gpuscope.core.kube_objects) carry every other kind an
    analysis reads; the quota view reads its queues and quotas from them, and each reader
    picks its own kinds from the set."""
    objects = objects or ObjectSet()
    from gpuscope.analytics.placement.allocation_sources import state_from_kubectl
    from gpuscope.analytics.placement.fragmentation import analyze_fragmentation, learn_task_mix
    from gpuscope.analytics.trace import read_trace

    for path in (nodes, pods):
        if not path.is_file():
            raise UserError(f"{path} does not exist")
    if nodes.suffix.lower() == ".csv" or pods.suffix.lower() == ".csv":
        if what != "fragmentation":
            raise UserError(f"the trace's CSVs hold no pods to run {what} on; use kubectl JSON")
        state, tasks = read_trace(nodes, pods)
        mix = learn_task_mix(tasks, settings.analytics.fgd_task_coverage)
        return analyze_fragmentation(state, at=at, settings=settings.analytics, mix=mix)
    docs = []
    for path in (nodes, pods):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UserError(f"{path} is not kubectl JSON: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
            raise UserError(f"{path} is not a kubectl List (no 'items')")
        docs.append(doc)
    if what == "quota":
        return _quota_from_files(docs[0], docs[1], at, settings, objects)
    if what == "consolidation":
        from gpuscope.analytics.placement.allocation_sources import kubectl_records

        node_infos, pod_infos, known = kubectl_records(
            docs[0], docs[1], settings.workloads, objects
        )
        # --objects' budgets, and its Topology objects for the pod groups' domains
        return _consolidation(
            node_infos, pod_infos, known, objects, budgets_of(objects), at, settings
        )
    state = state_from_kubectl(docs[0], docs[1], settings.workloads, objects=objects)
    return analyze_fragmentation(state, at=at, settings=settings.analytics)


def _quota_from_files(
    nodes_doc: dict[str, Any],
    pods_doc: dict[str, Any],
    at: datetime,
    settings: Settings,
    objects: ObjectSet,
) -> Analysis:
    """The quota view of a snapshot: the queue model on the files' pods and the queue and
    quota objects of ``--objects``, a job quota admits judged by the placement of the same
    snapshot; no fairness window (files hold no history)."""
    from gpuscope.analytics.placement.allocation import state_from_records
    from gpuscope.analytics.placement.allocation_sources import kubectl_records
    from gpuscope.analytics.placement.fragmentation import analyze_fragmentation
    from gpuscope.analytics.queueing.queues import judge
    from gpuscope.analytics.queueing.quota import kueue_fair_sharing, quota_analysis
    from gpuscope.collector.cluster.queue_records import quotas_from_objects

    # DRA claims in ``objects`` count as device-plugin GPUs in quota usage too
    node_infos, pod_infos, known = kubectl_records(nodes_doc, pods_doc, settings.workloads, objects)
    quotas = quotas_from_objects(objects)
    held = sum(p.gpus for p in pod_infos if p.node and p.phase in ("Running", "Pending"))
    capacity = float(sum(n.allocatable_gpus for n in node_infos if n.ready))
    free = max(0.0, capacity - held)

    def placement() -> dict[str, Any]:
        state = state_from_records(node_infos, pod_infos, known)
        return dict(analyze_fragmentation(state, at=at, settings=settings.analytics).summary)

    labels = {n.name: n.labels for n in node_infos}
    state = judge(
        pod_infos,
        quotas,
        free_gpus=free,
        capacity_gpus=capacity,
        node_labels=labels,
        fair_sharing=kueue_fair_sharing(settings.analytics),
    )
    found = quota_analysis(state, utc(at), placement)
    found.summary["data_until"] = None
    return found


def as_json(analyses: dict[str, Analysis]) -> dict[str, Any]:
    """docs/design.md's analysis output: ``{"findings": [...], "summary": {...}}``; with several
    detectors the summary is keyed by detector. Times are RFC 3339 with Z, as in the API."""
    findings = [_finding_json(f) for a in analyses.values() for f in a.findings]
    if len(analyses) == 1:
        (summary,) = (a.summary for a in analyses.values())
    else:
        summary = {name: a.summary for name, a in analyses.items()}
    out: dict[str, Any] = {"findings": findings, "summary": summary}
    plan = analyses.get("consolidation")
    if plan is not None:  # docs/design.md: the consolidation output has these at its top
        for key in ("moves", "evictions", "unplaceable"):
            out[key] = plan.summary.get(key, [])
    return cast(dict[str, Any], api_times(out))


def _finding_json(f: Any) -> dict[str, Any]:
    return {
        "id": f.id,
        "kind": f.kind,
        "severity": f.severity,
        "subject": f.subject,
        "since": rfc3339(f.since) if f.since else None,
        "observed_at": rfc3339(f.observed_at),
        "evidence": f.evidence,
        "recommendation": f.recommendation,
    }


def render_text(analyses: dict[str, Analysis]) -> str:
    """A readable report: findings as a table, then each detector's headline numbers."""
    lines: list[str] = []
    findings = [f for a in analyses.values() for f in a.findings]
    order = {"critical": 0, "warning": 1, "info": 2}
    findings.sort(key=lambda f: (order.get(f.severity, 3), f.kind, sorted(f.subject.items())))
    if findings:
        rows = [("SEVERITY", "KIND", "SUBJECT", "SINCE", "RECOMMENDATION")]
        for f in findings:
            subject = " ".join(f"{k}={v}" for k, v in sorted(f.subject.items()))
            since = f.since.strftime("%Y-%m-%d %H:%M") if f.since else "-"
            rec = f.recommendation.get("action", "-") if f.recommendation else "-"
            rows.append((f.severity, f.kind, subject, since, str(rec)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                  for r in rows]  # fmt: skip
    else:
        lines.append("no findings")
    for name, a in analyses.items():
        # times as --at takes them (data_until is what a user copies into --at)
        flat = api_times({k: v for k, v in a.summary.items() if isinstance(v, int | float | str)})
        if flat:
            lines.append("")
            lines.append(f"{name}: " + ", ".join(f"{k}={_fmt(v)}" for k, v in flat.items()))
        groups = a.summary.get("pod_groups") if name == "consolidation" else None
        for g in groups or ():  # consolidation's pending pod groups (topology's is a count)
            where = (
                f"frees {g['domain']} ({g['level'] or 'no level'}): nodes " + ", ".join(g["nodes"])
                if g["planned"]
                else f"no plan: {g['reason']}"
            )
            lines.append(
                f"  pod group {g['pod_group']} ({g['pods']} x {g['gpus_per_pod']} GPUs, "
                f"{g['mode']}) {where}"
            )
        for job in a.summary.get("pending_jobs") or ():  # the queue model's verdicts
            victims = ", ".join(f"{v['namespace']}/{v['job']}" for v in job["victims"])
            lines.append(
                f"  {job['namespace']}/{job['job']} ({_fmt(job['gpus'])} GPUs, {job['project']}) "
                f"waits on {job['waits_on']} [{job['rule']}]: {job['reason']}"
                + (f"; preempts {victims}" if victims else "")
            )
    return "\n".join(lines) + "\n"


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else f"{v:.3f}".rstrip("0")
    return str(v)
