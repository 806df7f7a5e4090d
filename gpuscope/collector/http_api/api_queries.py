"""Named SQL of the HTTP API. Parameters are bound ($name); only fixed fragments chosen from
the tables below (never user input) complete a template."""

from __future__ import annotations

from gpuscope.collector.storage.held_gpus import summary_row, with_held_gpus
from gpuscope.collector.storage.writer_log import LAST_SEEN_LAG_S

GPU_UTIL = "gpuscope_gpu_utilization_ratio"
WORKLOAD_UTIL = "gpuscope_gpu_workload_utilization_ratio"

#: ``series.last_seen`` lags a series' newest sample by up to LAST_SEEN_LAG_S (the writer's
#: log, collector/storage/writer_log.py): the series prefilter reaches back that much more.
_LAG = LAST_SEEN_LAG_S

#: Levels over GPUs: a fleet summary's series (docs/scale.md, "Fleet summaries") is a
#: workload's busy peak, not a GPU's utilization, and free GPUs have none, so these levels
#: leave workload summaries out and say so (:data:`SUMMARIES_NOTE`); cluster and node read
#: node summaries where the range has them (:mod:`.api_node_summaries`).
GPU_LEVELS = frozenset({"cluster", "node", "gpu"})
#: level -> (metric, key expression over `series AS s`)
_LEVELS: dict[str, tuple[str, str]] = {
    "cluster": (GPU_UTIL, "'cluster'"),
    "node": (GPU_UTIL, "s.node"),
    "gpu": (
        GPU_UTIL,
        "s.node || '/' || s.gpu || CASE WHEN s.mig_instance <> '' "
        "THEN '/mig' || s.mig_instance ELSE '' END",
    ),
    "namespace": (WORKLOAD_UTIL, "s.namespace"),
    "project": (WORKLOAD_UTIL, "coalesce(p.project, s.namespace)"),
    "workload": (WORKLOAD_UTIL, "s.namespace || '/' || s.pod"),
}

#: Plain: each series one GPU, a step's mean over its samples and the series counted.
_PLAIN = {
    "held": "",
    "gpus": "",
    "held_join": "",
    "binned": """binned AS (
    SELECT pk.key,
           time_bucket(to_seconds($step), x.ts, TIMESTAMP '1970-01-01') AS bucket,
           sum(x.vsum) / sum(x.n) AS value,
           count(DISTINCT x.series_id) AS series
    FROM ({source}) AS x
    JOIN picked AS pk USING (series_id)
    JOIN page USING (key)
    GROUP BY ALL
)""",
}
#: With fleet summaries in the range (the workload levels only: the GPU levels leave them
#: out): each series weighted by the GPUs it stands for (1; a fleet summary's workload key
#: every GPU it holds, at most over its intervals), so the mean is per GPU and `series`
#: counts GPUs. A level of aggregation more (per series, then per key), so only then.
_BY_GPUS = {
    "held": with_held_gpus("""
held AS (
    SELECT gpu_uuid AS uuid, max({held_gpus}) AS gpus
    FROM workload_intervals WHERE {summary_row} GROUP BY gpu_uuid
),"""),
    "gpus": ", coalesce(h.gpus, 1.0) AS gpus",
    "held_join": "\n    LEFT JOIN held AS h ON h.uuid = s.uuid",
    "binned": """per_series AS (
    SELECT pk.key, x.series_id, any_value(pk.gpus) AS gpus,
           time_bucket(to_seconds($step), x.ts, TIMESTAMP '1970-01-01') AS bucket,
           sum(x.vsum) AS vsum, sum(x.n) AS n
    FROM ({source}) AS x
    JOIN picked AS pk USING (series_id)
    JOIN page USING (key)
    GROUP BY pk.key, x.series_id, bucket
),
binned AS (
    SELECT key, bucket, sum(vsum * gpus) / sum(n * gpus) AS value,
           round(sum(gpus)) AS series
    FROM per_series GROUP BY key, bucket
)""",
}

_UTILIZATION = """
WITH projects AS (
    SELECT DISTINCT namespace, pod, labels['project'] AS project
    FROM series WHERE metric = 'gpuscope_gpu_workload_info'
),{held}
picked AS (
    SELECT s.series_id, {key} AS key{gpus}
    FROM series AS s LEFT JOIN projects AS p USING (namespace, pod){held_join}
    WHERE s.metric = '{metric}'{only_gpus}
      AND ($node IS NULL OR s.node = $node)
      AND ($namespace IS NULL OR s.namespace = $namespace)
      AND ($project IS NULL OR coalesce(p.project, s.namespace) = $project)
      AND s.last_seen >= CAST($start AS TIMESTAMP) - INTERVAL {lag} SECOND
),
page AS (
    SELECT DISTINCT key FROM picked ORDER BY key LIMIT $limit OFFSET $offset
),
{binned}
SELECT key,
       to_json(list([epoch(bucket), value, CAST(series AS DOUBLE)] ORDER BY bucket)) AS points
FROM binned GROUP BY key ORDER BY key
"""

_UTILIZATION_KEYS = """
WITH projects AS (
    SELECT DISTINCT namespace, pod, labels['project'] AS project
    FROM series WHERE metric = 'gpuscope_gpu_workload_info'
)
SELECT count(DISTINCT {key})
FROM series AS s LEFT JOIN projects AS p USING (namespace, pod)
WHERE s.metric = '{metric}'{only_gpus}
  AND ($node IS NULL OR s.node = $node)
  AND ($namespace IS NULL OR s.namespace = $namespace)
  AND ($project IS NULL OR coalesce(p.project, s.namespace) = $project)
  AND s.last_seen >= CAST($start AS TIMESTAMP) - INTERVAL {lag} SECOND
"""

#: Raw samples, each its own weight; a NaN or infinite gauge sample is left out of means
#: (it would make the step NaN, and DuckDB's JSON would then hold a NaN literal).
_RAW = """
    SELECT series_id, ts, value AS vsum, 1 AS n FROM samples
    WHERE ts >= $start AND ts < $end AND isfinite(value)
"""
#: Roll-ups up to their frontier (meta), raw samples after it: week-long views read a few
#: rows per series instead of thousands, and the newest minutes are still exact.
_ROLLED = """
    SELECT series_id, bucket AS ts, sum AS vsum, count AS n FROM {table}
    WHERE bucket >= $start AND bucket < $end AND bucket < $frontier
    UNION ALL
    SELECT series_id, ts, value, 1 FROM samples
    WHERE ts >= $start AND ts < $end AND ts >= $frontier AND isfinite(value)
"""
#: How far each roll-up is complete (read first and bound as a constant, so that DuckDB
#: can skip the raw row groups before it by their min/max statistics).
FRONTIER = "SELECT value FROM meta WHERE key = $key"
FRONTIER_KEYS = {"1h": "rollup_1h_until", "5m": "rollup_5m_until"}
#: Which samples a step reads: the coarsest resolution that divides it.
RESOLUTIONS: tuple[tuple[str, int, str], ...] = (
    ("1h", 3600, _ROLLED.format(table="samples_1h")),
    ("5m", 300, _ROLLED.format(table="samples_5m")),
    ("raw", 0, _RAW),
)


def _only_gpus(level: str) -> str:
    return f"\n      AND NOT {summary_row('s.uuid')}" if level in GPU_LEVELS else ""


def _utilization(level: str, source: str, parts: dict[str, str]) -> str:
    metric, key = _LEVELS[level]
    body = _UTILIZATION.replace("{binned}", parts["binned"])
    fill = {k: v for k, v in parts.items() if k != "binned"}
    return body.format(
        key=key, metric=metric, source=source, lag=_LAG, only_gpus=_only_gpus(level), **fill
    )


#: (level, resolution) -> the view's SQL; UTILIZATION_BY_GPUS where the range has fleet
#: summaries (HAS_SUMMARIES) and the level is a workload level.
UTILIZATION: dict[tuple[str, str], str] = {
    (level, res): _utilization(level, source, _PLAIN)
    for level in _LEVELS
    for res, _, source in RESOLUTIONS
}
UTILIZATION_BY_GPUS: dict[tuple[str, str], str] = {
    (level, res): _utilization(level, source, _BY_GPUS)
    for level in _LEVELS
    if level not in GPU_LEVELS
    for res, _, source in RESOLUTIONS
}

#: Whether the range has fleet summaries of the level's metric (then the answer says what
#: they mean for it).
_HAS_SUMMARIES = """
WITH projects AS (
    SELECT DISTINCT namespace, pod, labels['project'] AS project
    FROM series WHERE metric = 'gpuscope_gpu_workload_info'
)
SELECT count(*) > 0
FROM series AS s LEFT JOIN projects AS p USING (namespace, pod)
WHERE s.metric = '{metric}' AND {summary}
  AND ($node IS NULL OR s.node = $node)
  AND ($namespace IS NULL OR s.namespace = $namespace)
  AND ($project IS NULL OR coalesce(p.project, s.namespace) = $project)
  AND s.last_seen >= CAST($start AS TIMESTAMP) - INTERVAL {lag} SECOND
"""
HAS_SUMMARIES: dict[str, str] = {
    level: _HAS_SUMMARIES.format(metric=metric, summary=summary_row("s.uuid"), lag=_LAG)
    for level, (metric, _) in _LEVELS.items()
}
SUMMARIES_NOTE = {
    True: (
        "fleet summaries (collector.query.summaries) store no per-GPU utilization: by=gpu "
        "(and by=cluster and node where the range has no node summaries, or with a namespace "
        "or project filter) cannot be computed "
        "from them and leaves their workloads out; by=namespace, project or workload counts "
        "each workload's GPUs"
    ),
    False: (
        "fleet summaries (collector.query.summaries): each workload's value is its peak "
        "utilization in each 5-minute bucket, weighted by the GPUs it holds (an upper bound)"
    ),
}


def resolution_for(step_seconds: float) -> str:
    """The coarsest stored resolution whose buckets divide ``step_seconds`` exactly."""
    for name, seconds, _ in RESOLUTIONS:
        if seconds and step_seconds >= seconds and step_seconds % seconds == 0:
            return name
    return "raw"


UTILIZATION_KEYS: dict[str, str] = {
    level: _UTILIZATION_KEYS.format(key=key, metric=metric, lag=_LAG, only_gpus=_only_gpus(level))
    for level, (metric, key) in _LEVELS.items()
}

INVENTORY = {
    "nodes": "SELECT key, record, valid_from FROM inventory_nodes WHERE valid_to IS NULL "
    "ORDER BY key LIMIT $limit OFFSET $offset",
    "pods": "SELECT key, record, valid_from FROM inventory_pods WHERE valid_to IS NULL "
    "ORDER BY key LIMIT $limit OFFSET $offset",
    "quotas": "SELECT key, record, valid_from FROM quotas WHERE valid_to IS NULL "
    "ORDER BY key LIMIT $limit OFFSET $offset",
}
INVENTORY_COUNT = {
    "nodes": "SELECT count(*) FROM inventory_nodes WHERE valid_to IS NULL",
    "pods": "SELECT count(*) FROM inventory_pods WHERE valid_to IS NULL",
    "quotas": "SELECT count(*) FROM quotas WHERE valid_to IS NULL",
}

FINDINGS = """
SELECT id, kind, severity, subject, since, observed_at, evidence, recommendation, resolved_at
FROM findings
WHERE ($kind IS NULL OR kind = $kind)
  AND ($severity IS NULL OR severity = $severity)
  AND ($open_only = false OR resolved_at IS NULL)
  AND ($with_recommendation = false OR recommendation IS NOT NULL)
ORDER BY observed_at DESC, id
LIMIT $limit OFFSET $offset
"""
FINDINGS_COUNT = """
SELECT count(*) FROM findings
WHERE ($kind IS NULL OR kind = $kind)
  AND ($severity IS NULL OR severity = $severity)
  AND ($open_only = false OR resolved_at IS NULL)
  AND ($with_recommendation = false OR recommendation IS NOT NULL)
"""
ACTIONS = """
SELECT id, ts, kind, finding_id, dry_run, result, record FROM actions
WHERE ($kind IS NULL OR kind = $kind)
ORDER BY ts DESC, id LIMIT $limit OFFSET $offset
"""
ACTIONS_COUNT = "SELECT count(*) FROM actions WHERE ($kind IS NULL OR kind = $kind)"
SERIES_COUNT = "SELECT count(*) FROM series"

#: The culler arbiter (GET /api/v1/arbiter/idle): does the pod hold GPUs now (a fleet
#: summary's workload key counts every GPU it holds), and is it in an open idle finding of
#: the last analytics run (as of that run, never before its findings)?
ARBITER_IDLE = with_held_gpus("""
WITH held AS (
    SELECT coalesce(sum(gpus), 0) AS gpus FROM (
        SELECT gpu_uuid, max({held_gpus}) AS gpus
        FROM workload_intervals
        WHERE namespace = $namespace AND pod = $pod AND end_ts IS NULL
        GROUP BY gpu_uuid)
),
idle AS (
    SELECT since FROM findings
    WHERE kind IN ('idle_session', 'workload_idle') AND resolved_at IS NULL
      AND subject->>'namespace' = $namespace AND subject->>'pod' = $pod
    ORDER BY observed_at DESC LIMIT 1
),
-- when the last idle analysis ran: its findings carry that time (observed_at); the saved
-- state's watermark lags the run by the late-sample delay, so alone it can be earlier than
-- an idle_since the run just found
as_of AS (
    SELECT greatest(
        (SELECT max(CAST(value AS TIMESTAMP)) FROM meta WHERE key = 'idle_state_until'),
        (SELECT max(observed_at) FROM findings
         WHERE kind IN ('idle_session', 'workload_idle', 'session_time_limit')
           AND resolved_at IS NULL)
    ) AS ts
)
SELECT held.gpus, idle.since, as_of.ts
FROM held CROSS JOIN as_of LEFT JOIN idle ON true
""")
#: One finding by id: its newest occurrence (for its drill-down).
FINDING_BY_ID = """
SELECT kind, subject, evidence, since, observed_at, resolved_at
FROM findings WHERE id = $id
ORDER BY observed_at DESC LIMIT 1
"""
