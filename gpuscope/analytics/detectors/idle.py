"""Idle GPUs: idle interactive sessions, idle batch/training workloads, sessions past their age.

A workload (namespace, pod, container) is idle when every GPU it holds stays under
``idle_utilization_below`` for ``idle_window_minutes``: the busy signal of a GPU is DCGM SM
activity where it has it, NVML utilization otherwise, and memory-controller utilization too
with ``idle_include_memory_activity``. Unknown is not idle: a GPU without samples through
the window (an agent down) makes its workload *unknown*; so is never idle a workload in its
start-up grace, nor one in a protected namespace or pod.

Why state: a window query over a week of 10,000 GPUs at 15 s reads ~800 M rows. What the
decision needs per GPU is small — when it was last busy, when it was last sampled, since
when its samples came without a gap — and each of those folds forward from new samples
alone. So :func:`run_idle` keeps them in ``gpu_activity_state`` (schema v3) with a watermark
in ``meta`` and reads only samples after it. A full re-analysis (no state, changed settings,
or ``at`` before the watermark) rebuilds the state from the 5-minute roll-ups for history
and raw samples for the recent tail. Both paths run the same fold query in DuckDB; Python
only turns the per-workload rows into findings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from importlib.resources import files
from typing import Any

import duckdb
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute  # type: ignore[import-untyped]

from gpuscope.analytics.base import Analysis
from gpuscope.analytics.detectors.idle_gaps import gap_note, with_rule
from gpuscope.analytics.detectors.idle_reads import fold_bound, fresh_keys, read_from
from gpuscope.collector.storage.held_gpus import with_held_gpus
from gpuscope.collector.storage.schema import GET_META, SET_META, begin
from gpuscope.collector.storage.store import Store, utc
from gpuscope.core.collector_settings import WorkloadSettings
from gpuscope.core.owners import pod_owner
from gpuscope.core.records import Finding, Severity, finding_id
from gpuscope.core.settings import AnalyticsSettings

KINDS: tuple[str, ...] = ("idle_session", "workload_idle", "session_time_limit")
#: Samples younger than this may still be in flight (a scrape is stored after it ends), so
#: the persisted state stops here; the run folds the last minute in without keeping it.
LATE_DELAY = timedelta(seconds=60)
#: Raw samples a full re-analysis reads at least (older history comes from roll-ups).
RAW_HORIZON = timedelta(hours=2)
#: How far back a full re-analysis looks in the roll-ups.
HISTORY = timedelta(days=7)
#: Raw samples read before a fold's range, only to learn each key's sample spacing from
#: its earlier gaps (a fold of a few new samples has too few gaps of its own).
LOOKBACK = timedelta(minutes=45)
WATERMARK_KEY = "idle_state_until"
CONFIG_KEY = "idle_state_config"
_EPOCH = datetime(1970, 1, 1)
#: Columns persisted in gpu_activity_state, in the table's order (``spacing``, the learned
#: sample spacing in seconds, since schema v10).
_PERSISTED = (
    "uuid", "last_busy_ts", "last_busy_value", "last_sample_ts", "covered_since", "signal",
    "lookback_from", "spacing",
)  # fmt: skip
_STATE_SCHEMA = pa.schema([
    ("uuid", pa.string()), ("last_busy_ts", pa.timestamp("us")),
    ("last_busy_value", pa.float64()), ("last_sample_ts", pa.timestamp("us")),
    ("covered_since", pa.timestamp("us")), ("signal", pa.string()), ("spacing", pa.float64()),
    ("lookback_from", pa.timestamp("us")),
])  # fmt: skip


#: The queries that read the run's resolved busy series (the registered table ``busy``)
#: instead of resolving them again (the bridged gaps' own resolution was ~10 ms of a run
#: on 8 nodes, issue 39).
_READS_RESOLVED = frozenset({"fold", "bridged_gaps"})
_RESOLVED = "busy_series AS (SELECT series_id, key, signal, share FROM busy)"


def _load_queries() -> dict[str, str]:
    text = files("gpuscope.analytics").joinpath("sql", "idle.sql").read_text(encoding="utf-8")
    parts = re.split(r"^-- name: (\w+)\n", text, flags=re.MULTILINE)
    named = {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}
    busy = named.pop("busy_series")
    return {
        name: with_rule(
            with_held_gpus(
                body.replace("{busy_series}", _RESOLVED if name in _READS_RESOLVED else busy)
            )
        )
        for name, body in named.items()
    }


#: Named queries from gpuscope/analytics/sql/idle.sql.
Q = _load_queries()
#: The parameters the fold binds (DuckDB refuses any it does not use: the run's ``at`` and
#: ``memory`` are the busy series', resolved before it).
_FOLD_PARAMS = frozenset(re.findall(r"\$(\w+)", Q["fold"]))


def _floor(ts: datetime, seconds: int) -> datetime:
    return _EPOCH + timedelta(seconds=int((ts - _EPOCH).total_seconds()) // seconds * seconds)


def _config(settings: AnalyticsSettings, declared_s: float) -> str:
    """What the state depends on: a state built under other settings is rebuilt."""
    return json.dumps(
        {
            "threshold": settings.idle_utilization_below,
            "memory": settings.idle_include_memory_activity,
            "declared_interval_s": declared_s,
            "rule": "learned-spacing-v2-bridged-gaps",
        },
        sort_keys=True,
    )


def _fold(
    cur: duckdb.DuckDBPyConnection,
    prior: pa.Table,
    lo: datetime,
    hi: datetime,
    params: dict[str, Any],
    bound: datetime | None = None,
) -> pa.Table:
    """``prior`` folded with the samples in (lo, hi]; the look-back read from ``bound``
    on (gpuscope/analytics/detectors/idle_reads.py; None: whole). The busy series are the
    table ``busy`` registered on ``cur`` (:func:`_busy`)."""
    if hi <= lo:
        return prior
    cur.register("prior", prior)
    try:
        start = read_from(bound, lo, LOOKBACK)
        bound_params = {**params, "lo": lo, "hi": hi, "read_from": start}
        return _state_rows(cur, Q["fold"], {k: bound_params[k] for k in _FOLD_PARAMS})
    finally:
        cur.unregister("prior")


def _state_rows(
    cur: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | None = None
) -> pa.Table:
    """The state rows ``sql`` returns (its columns by name, in :data:`_STATE_SCHEMA`).

    Run with ``execute`` and built column by column: ``cur.sql(...).to_arrow_table()``
    binds the statement once more before it runs it (~8 ms of CPU a fold, two folds a
    run: issue 39); the rows are a few per GPU."""
    result = cur.execute(sql, params)
    names = [d[0] for d in result.description or ()]
    rows = result.fetchall()
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(names)
    by_name = dict(zip(names, columns, strict=True))
    none = [None] * len(rows)  # a column the query does not give (lookback_from) is null
    arrays = [pa.array(by_name.get(f.name, none), f.type) for f in _STATE_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=_STATE_SCHEMA)


_BUSY_SCHEMA = pa.schema([
    ("series_id", pa.uint32()), ("key", pa.string()), ("signal", pa.string()),
    ("share", pa.float64()), ("last_seen", pa.timestamp("us")),
])  # fmt: skip


def _busy(cur: duckdb.DuckDBPyConnection, params: dict[str, Any]) -> pa.Table:
    """The busy series at the run's instant (series_id, key, signal, share, last_seen),
    resolved once for the run's folds and their read bounds (which keys can have new
    samples). Fetched as rows (a few a GPU): an Arrow fetch of a DB-API result copies them
    once more, and warns."""
    rows = cur.execute(Q["busy"], {"at": params["at"], "memory": params["memory"]}).fetchall()
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(_BUSY_SCHEMA)
    arrays = [pa.array(c, f.type) for c, f in zip(columns, _BUSY_SCHEMA, strict=True)]
    return pa.Table.from_arrays(arrays, schema=_BUSY_SCHEMA)


def _register_busy(
    cur: duckdb.DuckDBPyConnection, at: datetime, settings: AnalyticsSettings
) -> pa.Table:
    """The busy series at ``at`` (:func:`_busy`), registered on ``cur`` as ``busy`` for the
    run's folds and bridged gaps."""
    busy = _busy(cur, {"at": at, "memory": settings.idle_include_memory_activity})
    cur.register("busy", busy)
    return busy


def _meta(cur: duckdb.DuckDBPyConnection, key: str) -> str | None:
    rows = cur.execute(GET_META, [key]).fetchall()  # fetched whole: the cursor is reused
    return str(rows[0][0]) if rows else None


def _empty_state() -> pa.Table:
    return _STATE_SCHEMA.empty_table()


def activity_state(
    store: Store,
    at: datetime,
    settings: AnalyticsSettings,
    *,
    scrape_interval_s: float = 15.0,
    persist: bool = True,
) -> tuple[pa.Table, bool, bool]:
    """Each GPU's activity state as of ``at``; whether it came from the saved state (else
    a full re-analysis); whether it was saved.

    Incremental when a state saved under the same settings exists at or before ``at``: only
    samples after its watermark are read. Otherwise a full re-analysis. With ``persist``
    the state up to ``at - LATE_DELAY`` is saved (never for an ``at`` before the watermark:
    a look into the past must not move the scheduled run's state back).
    """
    at = utc(at).replace(microsecond=0)
    cur = store.cursor()
    try:
        busy = _register_busy(cur, at, settings)
        return _activity_state(cur, busy, store, at, settings, scrape_interval_s, persist)
    finally:
        cur.close()


def _activity_state(
    cur: duckdb.DuckDBPyConnection,
    busy: pa.Table,
    store: Store,
    at: datetime,
    settings: AnalyticsSettings,
    scrape_interval_s: float,
    persist: bool,
) -> tuple[pa.Table, bool, bool]:
    """:func:`activity_state` on ``cur``, where ``busy`` (the run's busy series at ``at``)
    is registered: the run's later queries (the bridged gaps) read it too."""
    params: dict[str, Any] = {
        "at": at,
        "threshold": settings.idle_utilization_below,
        "memory": settings.idle_include_memory_activity,
        "declared_s": float(scrape_interval_s),
        "lookback": LOOKBACK,
        "lookback_s": LOOKBACK.total_seconds(),
    }
    config = _config(settings, float(scrape_interval_s))
    saved_until = _meta(cur, WATERMARK_KEY)
    saved_config = _meta(cur, CONFIG_KEY)
    watermark = utc(saved_until) if saved_until else None
    incremental = watermark is not None and watermark <= at and saved_config == config
    bound = None
    if incremental:
        assert watermark is not None
        lo = watermark
        prior = _state_rows(cur, Q["load_state"])
        bound = fold_bound(prior, lo, fresh_keys(busy, lo), LOOKBACK)
    else:
        rolled = _meta(cur, "rollup_5m_until")
        lo = _floor(at - RAW_HORIZON, 300)
        lo = min(lo, utc(rolled)) if rolled else _EPOCH
        if lo > _EPOCH:
            history = {k: v for k, v in params.items() if k != "lookback"}
            history |= {"lo": lo, "since": at - HISTORY}
            prior = _state_rows(cur, Q["rollup_prior"], history)
            lo -= timedelta(seconds=1)  # raw samples from lo on: (lo - 1 s, ...]
        else:
            prior = _empty_state()
    keep = persist and not store.read_only and (watermark is None or watermark <= at)
    until = max(lo, at - LATE_DELAY)
    saved = _fold(cur, prior, lo, until, params, bound)
    bound = fold_bound(saved, until, fresh_keys(busy, until), LOOKBACK)
    state = _fold(cur, saved, until, at, params, bound)
    if keep:
        with begin(cur):
            cur.execute("DELETE FROM gpu_activity_state")
            cur.register("saved", saved.select(list(_PERSISTED)))
            try:
                cur.execute("INSERT OR REPLACE INTO gpu_activity_state SELECT * FROM saved")
            finally:
                cur.unregister("saved")
            cur.execute(SET_META, [WATERMARK_KEY, until.isoformat()])
            if saved_config != config:  # as read above: unchanged, one statement less
                cur.execute(SET_META, [CONFIG_KEY, config])  # (~1.5 ms a run, issue 39)
    return state, incremental, keep


def _subject(row: dict[str, Any]) -> dict[str, str]:
    return {"namespace": row["namespace"], "pod": row["pod"], "container": row["container"]}


def _recommendation(row: dict[str, Any]) -> dict[str, Any]:
    """Stop a notebook, delete any other interactive pod; only ever for interactive ones."""
    action = "stop-notebook" if row["kind"] in (None, "interactive") else "delete"
    return {"action": action, "target": {"namespace": row["namespace"], "pod": row["pod"]}}


def _workload_rows(
    cur: duckdb.DuckDBPyConnection,
    state: pa.Table,
    at: datetime,
    settings: AnalyticsSettings,
    workloads: WorkloadSettings,
    scrape_interval_s: float,
) -> list[dict[str, Any]]:
    window = timedelta(minutes=settings.idle_window_minutes)
    params = {
        "at": at,
        "window_start": at - window,
        "grace_start": at - timedelta(minutes=settings.startup_grace_minutes),
        "declared_s": float(scrape_interval_s),
        # an interval unseen this long (its agent gone, never closed) is no longer held
        "stale": at - max(4 * window, timedelta(hours=1)),
        "protected": list(workloads.protected_namespaces),
    }
    cur.register("state", state)
    try:
        result = cur.execute(Q["workloads"], params)
        names = [d[0] for d in result.description or ()]
        rows = [dict(zip(names, r, strict=True)) for r in result.fetchall()]
    finally:
        cur.unregister("state")
    for row in rows:
        row["bridged_gap_s"] = None
    gap_params = {"at": at, "declared_s": float(scrape_interval_s)}
    _bridged_gaps(cur, [row for row in rows if row["status"] == "idle"], gap_params)
    for row in rows:
        row["owner"] = pod_owner(row.pop("pod_labels"), workloads.owner_label_keys,
                                 row.pop("owner_kind"), row.pop("owner_name"))  # fmt: skip
        row["project"] = row["project"] or row["namespace"]
    return rows


def _bridged_gaps(
    cur: duckdb.DuckDBPyConnection, idle: Sequence[dict[str, Any]], params: dict[str, Any]
) -> None:
    """Set ``bridged_gap_s`` of each idle workload to the longest gap in data it was
    judged idle through (seconds), where there was one: the finding says so, since its
    idle time runs across data it did not see. One query for all of them, over the run's
    busy series (the table ``busy`` registered on ``cur``)."""
    asked = [row for row in idle if row["idle_since"] is not None]
    if not asked:
        return
    keys = []
    for row in asked:
        own = f"{row['namespace']}/{row['pod']}/{row['container']}"
        keys.append([*row["gpu_uuids"], *(f"{u}|{own}" for u in row["gpu_uuids"])])
    since = [row["idle_since"] for row in asked]
    found = cur.execute(
        Q["bridged_gaps"],
        {**params, "wid": list(range(len(asked))), "keys": keys, "since": since,
         "lo": min(since)},
    ).fetchall()  # fmt: skip
    for wid, gap in found:
        if gap is not None:
            asked[wid]["bridged_gap_s"] = float(gap)


def _findings(
    rows: Sequence[dict[str, Any]], at: datetime, settings: AnalyticsSettings
) -> tuple[list[Finding], dict[str, Any]]:
    window = timedelta(minutes=settings.idle_window_minutes)
    max_age = timedelta(hours=settings.max_session_age_hours)
    findings: list[Finding] = []
    summary: dict[str, Any] = {
        "workloads": len(rows),
        "idle_sessions": 0,
        "idle_workloads": 0,
        "idle_gpus": 0,
        "gpu_hours_wasted": 0.0,
        "interactive_sessions": 0,
        "sessions_over_time_limit": 0,
        "unknown_workloads": 0,
    }
    for row in rows:
        row["gpus"] = _gpus(row["gpus"])
        interactive = bool(row["interactive"])
        summary["interactive_sessions"] += interactive
        summary["unknown_workloads"] += row["status"] == "unknown"
        subject = _subject(row)
        if row["status"] == "idle":
            idle_for = at - row["idle_since"]
            wasted = round(row["gpus"] * idle_for.total_seconds() / 3600, 4)
            summary["idle_gpus"] += row["gpus"]
            summary["gpu_hours_wasted"] += wasted
            evidence = {
                "idle_since": row["idle_since"].isoformat(),
                "idle_minutes": round(idle_for.total_seconds() / 60, 2),
                "gpus_held": row["gpus"],
                "gpu_uuids": list(row["gpu_uuids"]),
                "node": row["node"],
                "gpu_hours_wasted": wasted,
                "last_busy_utilization": row["last_busy_value"],
                "signal": row["signal"],
                "threshold": settings.idle_utilization_below,
                "window_minutes": settings.idle_window_minutes,
                "workload_kind": row["kind"] or "unknown",
                # for routing (alerts, gpuscope_findings' labels)
                "owner": row["owner"],
                "project": row["project"],
            }
            if row.get("bridged_gap_s"):
                evidence["data_gap_minutes"] = round(row["bridged_gap_s"] / 60, 1)
                evidence["note"] = gap_note(row["bridged_gap_s"])
            if interactive:
                summary["idle_sessions"] += 1
                severity: Severity = "critical" if idle_for >= 4 * window else "warning"
                kind, rec = "idle_session", _recommendation(row)
            else:
                summary["idle_workloads"] += 1
                severity, kind, rec = "info", "workload_idle", None
            findings.append(
                Finding(finding_id(kind, subject), kind, severity, subject, row["idle_since"],
                        at, evidence, rec)
            )  # fmt: skip
        age = at - row["start_ts"]
        if interactive and settings.max_session_age_hours > 0 and age >= max_age:
            summary["sessions_over_time_limit"] += 1
            evidence = {
                "started_at": row["start_ts"].isoformat(),
                "age_hours": round(age.total_seconds() / 3600, 4),
                "max_session_age_hours": settings.max_session_age_hours,
                "gpus_held": row["gpus"],
                "gpu_uuids": list(row["gpu_uuids"]),
                "node": row["node"],
                "status": row["status"],
                "owner": row["owner"],
                "project": row["project"],
            }
            kind = "session_time_limit"
            findings.append(
                Finding(finding_id(kind, subject), kind, "warning", subject,
                        row["start_ts"] + max_age, at, evidence, _recommendation(row))
            )  # fmt: skip
    summary["gpu_hours_wasted"] = round(summary["gpu_hours_wasted"], 4)
    summary["idle_gpus"] = _gpus(summary["idle_gpus"])
    return findings, summary


def _gpus(value: float) -> float | int:
    """GPUs held: a whole number as an int, a fractional pod's share to 3 decimals."""
    rounded = round(float(value), 3)
    return int(rounded) if rounded.is_integer() else rounded


def data_until(state: pa.Table) -> datetime | None:
    """The newest sample the state has seen: the time the analysis's data reaches."""
    if state.num_rows == 0:
        return None
    newest = pa.compute.max(state.column("last_sample_ts")).as_py()
    return newest if isinstance(newest, datetime) else None


def _judge(
    store: Store,
    at: datetime,
    settings: AnalyticsSettings,
    workloads: WorkloadSettings,
    scrape_interval_s: float,
    persist: bool,
) -> tuple[pa.Table, list[dict[str, Any]], bool]:
    """The activity state at ``at``, every workload judged on it, and whether the state
    was saved: on one cursor, with one resolution of the busy series for the whole run."""
    cur = store.cursor()
    try:
        busy = _register_busy(cur, at, settings)
        state, _, saved = _activity_state(
            cur, busy, store, at, settings, scrape_interval_s, persist
        )
        rows = _workload_rows(cur, state, at, settings, workloads, scrape_interval_s)
    finally:
        cur.close()
    return state, rows, saved


def judged_workloads(
    store: Store,
    at: datetime,
    settings: AnalyticsSettings,
    workloads: WorkloadSettings,
    *,
    scrape_interval_s: float = 15.0,
) -> list[dict[str, Any]]:
    """Every workload holding GPUs at ``at`` as the detector judges it (the GPUs it holds,
    its status: starting, active, unknown or idle, its idle since), nothing saved: the rows
    the findings are made from, for a check that the judgement, not only the findings,
    agrees between two stores."""
    at = utc(at).replace(microsecond=0)
    return _judge(store, at, settings, workloads, scrape_interval_s, persist=False)[1]


def run_idle(
    store: Store,
    at: datetime,
    settings: AnalyticsSettings,
    workloads: WorkloadSettings,
    *,
    persist: bool = True,
    scrape_interval_s: float = 15.0,
    record: bool = True,
) -> Analysis:
    """Idle sessions, idle workloads and over-age sessions at ``at`` (a pure function of
    the store and ``at``).

    With ``persist`` (the collector's schedule) the activity state and the findings are
    saved and the next run reads only newer samples; ``persist=False`` writes nothing (a
    read-only CLI, ``--at`` in the past). ``record=False`` saves the state but leaves the
    findings to the caller (the collector's analytics job stores every detector's in one
    transaction of its own: storing them here too was a second write of the same rows).
    A gap over three ``scrape_interval_s`` in a GPU's samples is missing data.
    """
    at = utc(at).replace(microsecond=0)
    state, rows, saved = _judge(store, at, settings, workloads, scrape_interval_s, persist)
    findings, summary = _findings(rows, at, settings)
    newest = data_until(state)
    summary["data_until"] = newest.isoformat() if newest else None
    if saved and record:  # a look into the past saves nothing: it would resolve today's
        store.record_findings(findings, at, kinds=KINDS)
    return Analysis(kinds=KINDS, findings=findings, summary=summary)
