"""Named SQL of the API's utilization view by cluster and by node where the range has fleet
node summaries (docs/scale.md, "Fleet summaries"; docs/api.md).

Under ``collector.query.summaries`` the store holds no per-GPU utilization, but per node
and 5-minute bucket ``gpuscope:node_gpus`` (the GPUs present) and
``gpuscope:node_utilization_mean`` (the mean over its GPUs of each GPU's mean over the
bucket). A node read from them has, in each bucket where its ``gpuscope_agent_info`` is
stored, each summary's last value at or before that bucket within the hour (with
``collector.query.changes_only`` a summary is stored only where it changed, and every
node in each hour's last bucket). A point is the GPU-weighted mean over its nodes:
``sum(mean x gpus) / sum(gpus)`` at a 5-minute step, which is direct scraping's mean over
the GPUs' samples when every GPU is scraped alike. A longer step takes each node at the
GPU-weighted mean of its buckets in the step, weighted by its mean GPUs there; a shorter
one each bucket's value in every step it overlaps.

A node is one or the other: one with node summaries in the range is read from them only,
the others from their GPUs' own series (each GPU one weight in a step, at its mean over
its samples there), so nothing is counted twice. Parameters are bound ($name), the
5-minute roll-up's frontier as ``$frontier_5m``.
"""

from __future__ import annotations

from gpuscope.collector.http_api.api_queries import RESOLUTIONS
from gpuscope.collector.storage.held_gpus import summary_row
from gpuscope.collector.storage.writer_log import LAST_SEEN_LAG_S

GPU_UTIL = "gpuscope_gpu_utilization_ratio"
NODE_GPUS = "gpuscope:node_gpus"
NODE_MEAN = "gpuscope:node_utilization_mean"
AGENT_INFO = "gpuscope_agent_info"
#: A change-only summary's value is its last within the hour before (every node is stored
#: in each hour's last bucket).
CARRY_S = 3600
#: level -> the key over a column ``node``
KEYS = {"cluster": "'cluster'", "node": "node"}

#: The nodes read from node summaries, and the direct GPUs of the others (their keys).
_KEYED = """
WITH summary_nodes AS (
    SELECT DISTINCT node, {key} AS key FROM series
    WHERE metric = '{node_gpus}' AND ($node IS NULL OR node = $node)
      AND last_seen >= CAST($start AS TIMESTAMP) - INTERVAL {reach} SECOND
),
direct_gpus AS (
    SELECT s.series_id, s.node, {key} AS key FROM series AS s
    WHERE s.metric = '{gpu_util}' AND NOT {summary}
      AND ($node IS NULL OR s.node = $node)
      AND s.last_seen >= CAST($start AS TIMESTAMP) - INTERVAL {lag} SECOND
      AND s.node NOT IN (SELECT node FROM summary_nodes)
)"""

_UTILIZATION = """{keyed},
page AS (
    SELECT key FROM (SELECT key FROM summary_nodes UNION SELECT key FROM direct_gpus)
    ORDER BY key LIMIT $limit OFFSET $offset
),
kept AS (
    SELECT s.series_id, s.node, s.metric FROM series AS s
    JOIN summary_nodes AS n USING (node) JOIN page USING (key)
    WHERE s.metric IN ('{node_gpus}', '{node_mean}', '{agent_info}')
      AND s.last_seen >= CAST($start AS TIMESTAMP) - INTERVAL {reach} SECOND
),
-- one value a node, summary and 5-minute bucket (roll-ups up to their frontier, raw after)
stored AS (
    SELECT k.node, k.metric, x.bucket, avg(x.value) AS value
    FROM (
        SELECT series_id, bucket, sum / count AS value FROM samples_5m
        WHERE bucket >= CAST($start AS TIMESTAMP) - INTERVAL {carry} SECOND
          AND bucket < $end AND bucket < $frontier_5m
        UNION ALL
        SELECT series_id, time_bucket(INTERVAL 5 MINUTE, ts) AS bucket, value FROM samples
        WHERE ts >= CAST($start AS TIMESTAMP) - INTERVAL {carry} SECOND
          AND ts < $end AND ts >= $frontier_5m AND isfinite(value)
    ) AS x JOIN kept AS k USING (series_id)
    GROUP BY k.node, k.metric, x.bucket
),
-- per node and bucket: its agent seen, each summary stored there
grid AS (
    SELECT node, bucket, bool_or(metric = '{agent_info}') AS present,
           any_value(value) FILTER (WHERE metric = '{node_mean}') AS mean,
           any_value(value) FILTER (WHERE metric = '{node_gpus}') AS gpus
    FROM stored GROUP BY node, bucket
),
-- each summary's last value at or before each bucket, and where it was stored
last AS (
    SELECT node, bucket, present,
           last_value(mean IGNORE NULLS) OVER w AS mean,
           last_value(CASE WHEN mean IS NOT NULL THEN bucket END IGNORE NULLS) OVER w AS mean_at,
           last_value(gpus IGNORE NULLS) OVER w AS gpus,
           last_value(CASE WHEN gpus IS NOT NULL THEN bucket END IGNORE NULLS) OVER w AS gpus_at
    FROM grid
    WINDOW w AS (PARTITION BY node ORDER BY bucket ROWS UNBOUNDED PRECEDING)
),
-- the buckets overlapping [start, end) where the node's agent is present, each with its
-- summaries' last values within the hour
carried AS (
    SELECT node, bucket, mean, gpus FROM last
    WHERE present AND bucket > CAST($start AS TIMESTAMP) - INTERVAL 300 SECOND
      AND mean_at > bucket - INTERVAL {carry} SECOND
      AND gpus_at > bucket - INTERVAL {carry} SECOND
      AND isfinite(mean) AND gpus > 0
),
-- each bucket in every step it overlaps
stepped AS (
    SELECT node, mean, gpus, unnest(range(
        time_bucket(to_seconds($step), bucket, TIMESTAMP '1970-01-01'),
        bucket + INTERVAL 300 SECOND, to_seconds($step))) AS step
    FROM carried
),
per_node AS (
    SELECT {key} AS key, node, step, sum(mean * gpus) AS wsum, sum(gpus) AS w,
           count(*) AS buckets, max(gpus) AS gpus
    FROM stepped
    WHERE step < $end AND step + to_seconds($step) > $start
    GROUP BY ALL
),
per_gpu AS (
    SELECT d.key, time_bucket(to_seconds($step), x.ts, TIMESTAMP '1970-01-01') AS step,
           sum(x.vsum) / sum(x.n) AS mean
    FROM ({source}) AS x
    JOIN direct_gpus AS d USING (series_id)
    JOIN page USING (key)
    GROUP BY d.key, x.series_id, step
),
-- a node at its mean GPUs in the step; a direct GPU one
parts AS (
    SELECT key, step, wsum / buckets AS wsum, w / buckets AS w, gpus FROM per_node
    UNION ALL
    SELECT key, step, mean, 1.0, 1.0 FROM per_gpu
),
binned AS (
    SELECT key, step AS bucket, sum(wsum) / sum(w) AS value, round(sum(gpus)) AS series
    FROM parts GROUP BY key, step
)
SELECT key,
       to_json(list([epoch(bucket), value, CAST(series AS DOUBLE)] ORDER BY bucket)) AS points
FROM binned GROUP BY key ORDER BY key
"""

_KEYS = """{keyed}
SELECT count(*) FROM (SELECT key FROM summary_nodes UNION SELECT key FROM direct_gpus)
"""

#: Whether the range has node summaries (then cluster and node read them).
_HAS_NODE_SUMMARIES = """
SELECT count(*) > 0 FROM series
WHERE metric = '{node_gpus}' AND ($node IS NULL OR node = $node)
  AND last_seen >= CAST($start AS TIMESTAMP) - INTERVAL {reach} SECOND
"""

NOTE = (
    "fleet summaries (collector.query.summaries): by=cluster and node read each node's "
    "summaries (its GPUs' mean utilization in each 5-minute bucket, weighted by its GPUs; "
    "a node's last value within the hour where its agent is present); a step under 5 "
    "minutes gives each point its bucket's value; by=gpu cannot be computed from them"
)


def _fill(sql: str, key: str = "", source: str = "") -> str:
    return sql.replace("{keyed}", _KEYED).format(
        key=key,
        source=source,
        node_gpus=NODE_GPUS,
        node_mean=NODE_MEAN,
        agent_info=AGENT_INFO,
        gpu_util=GPU_UTIL,
        summary=summary_row("s.uuid"),
        lag=LAST_SEEN_LAG_S,
        reach=CARRY_S + LAST_SEEN_LAG_S,
        carry=CARRY_S,
    )


#: (level, resolution) -> the view's SQL (the direct GPUs read at that resolution)
UTILIZATION = {
    (level, res): _fill(_UTILIZATION, key, source)
    for level, key in KEYS.items()
    for res, _, source in RESOLUTIONS
}
#: level -> how many keys the view has
UTILIZATION_KEYS = {level: _fill(_KEYS, key) for level, key in KEYS.items()}
HAS_NODE_SUMMARIES = _fill(_HAS_NODE_SUMMARIES)
