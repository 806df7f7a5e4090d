-- Named queries of analytics/idle.py. Each query follows its own name line.
-- Parameters are bound ($name); `prior` is an Arrow table of gpu_activity_state rows that
-- idle.py registers. {busy_series} is filled in from the block of that name at load.

-- name: busy_series
-- The busy signal of each GPU (or MIG device) uuid: DCGM SM activity where the GPU has it,
-- NVML utilization otherwise; with $memory, memory-controller utilization too.
busy_candidates AS (
    SELECT series_id, uuid, metric
    FROM series
    WHERE uuid IS NOT NULL AND uuid <> '' AND first_seen <= $at
      AND metric IN ('gpuscope_gpu_sm_active_ratio', 'gpuscope_gpu_utilization_ratio',
                     'gpuscope_gpu_memory_utilization_ratio')
),
gpu_signal AS (
    SELECT uuid,
           CASE WHEN bool_or(metric = 'gpuscope_gpu_sm_active_ratio') THEN 'sm_active'
                ELSE 'utilization' END AS signal
    FROM busy_candidates GROUP BY uuid
),
busy_series AS (
    SELECT c.series_id, c.uuid, g.signal
    FROM busy_candidates AS c JOIN gpu_signal AS g USING (uuid)
    WHERE (g.signal = 'sm_active' AND c.metric = 'gpuscope_gpu_sm_active_ratio')
       OR (g.signal = 'utilization' AND c.metric = 'gpuscope_gpu_utilization_ratio')
       OR ($memory AND c.metric = 'gpuscope_gpu_memory_utilization_ratio')
)

-- name: fold
-- The state after the samples in ($lo, $hi]: `prior` folded with them. A sample time is
-- busy when any busy series of its GPU is at or over $threshold there; a gap over $max_gap
-- between consecutive sample times (the prior state's last one included) restarts
-- covered_since, so data missing in a window is seen as unknown, never as idle.
WITH {busy_series},
new_samples AS (
    SELECT b.uuid, s.ts, s.value
    FROM samples AS s JOIN busy_series AS b USING (series_id)
    WHERE s.ts > $lo AND s.ts <= $hi
),
per_time AS (
    SELECT uuid, ts, max(value) AS value, max(value) >= $threshold AS busy
    FROM new_samples GROUP BY uuid, ts
),
with_gaps AS (
    SELECT t.uuid, t.ts, t.value, t.busy,
           t.ts - coalesce(lag(t.ts) OVER (PARTITION BY t.uuid ORDER BY t.ts),
                           p.last_sample_ts) AS gap
    FROM per_time AS t LEFT JOIN prior AS p USING (uuid)
),
folded AS (
    SELECT uuid, min(ts) AS first_ts, max(ts) AS last_sample_ts,
           max(ts) FILTER (WHERE busy) AS last_busy_ts,
           arg_max(value, ts) FILTER (WHERE busy) AS last_busy_value,
           max(ts) FILTER (WHERE gap > $max_gap) AS after_gap
    FROM with_gaps GROUP BY uuid
),
signals AS (SELECT DISTINCT uuid, signal FROM busy_series)
SELECT uuid,
       coalesce(f.last_busy_ts, p.last_busy_ts) AS last_busy_ts,
       CASE WHEN f.last_busy_ts IS NOT NULL THEN f.last_busy_value
            ELSE p.last_busy_value END AS last_busy_value,
       greatest(f.last_sample_ts, p.last_sample_ts) AS last_sample_ts,
       CASE WHEN f.after_gap IS NOT NULL THEN f.after_gap
            WHEN p.covered_since IS NOT NULL THEN p.covered_since
            ELSE f.first_ts END AS covered_since,
       coalesce(g.signal, p.signal) AS signal
FROM folded AS f FULL JOIN prior AS p USING (uuid) LEFT JOIN signals AS g USING (uuid);

-- name: load_state
SELECT uuid, last_busy_ts, last_busy_value, last_sample_ts, covered_since, signal
FROM gpu_activity_state;

-- name: rollup_prior
-- The state before $lo from the 5-minute roll-ups (buckets in [$since, $lo)), for a full
-- re-analysis: a busy bucket counts as busy up to its end (idle since is never earlier
-- than the truth), data as continuous from the first bucket (a gap shorter than a bucket
-- cannot be seen in roll-ups), and the last sample as the last bucket's end.
WITH {busy_series},
buckets AS (
    SELECT b.uuid, b.signal, r.bucket, r.max
    FROM samples_5m AS r JOIN busy_series AS b USING (series_id)
    WHERE r.bucket >= $since AND r.bucket < $lo
)
SELECT uuid,
       max(bucket + INTERVAL 5 MINUTE) FILTER (WHERE max >= $threshold) AS last_busy_ts,
       arg_max(max, bucket) FILTER (WHERE max >= $threshold) AS last_busy_value,
       least(max(bucket) + INTERVAL 5 MINUTE, $lo) AS last_sample_ts,
       min(bucket) AS covered_since,
       any_value(signal) AS signal
FROM buckets GROUP BY uuid;

-- name: workloads
-- `state`: the activity state at $at (one row per uuid). Per workload (namespace, pod,
-- container) holding GPUs at $at: its start, GPUs, idle since (after its GPUs' last busy
-- sample, bounded below by its start on each GPU and by the start of gap-free data), and a
-- status: starting (within the start-up grace), active, unknown (a GPU without data through
-- the window), idle. Protected workloads (namespace list, or the pod's inventory record
-- says protected / gpuscope.io/protect=true) are left out.
WITH held AS (
    SELECT namespace, pod, container, gpu_uuid,
           any_value(node) AS node, any_value(kind) AS kind,
           bool_or(coalesce(interactive, false) OR kind = 'interactive') AS interactive,
           min(start_ts) AS start_ts
    FROM workload_intervals
    WHERE start_ts <= $at AND (end_ts IS NULL OR end_ts > $at) AND last_seen >= $stale
      AND NOT list_contains($protected, namespace)
    GROUP BY namespace, pod, container, gpu_uuid
),
protected_pods AS (
    SELECT DISTINCT key FROM inventory_pods
    WHERE valid_from <= $at AND (valid_to IS NULL OR valid_to > $at)
      AND (coalesce(TRY_CAST((record->>'protected') AS BOOLEAN), false)
           OR coalesce((record->'labels'->>'gpuscope.io/protect') = 'true', false))
),
per_gpu AS (
    SELECT h.*, s.last_busy_value, s.signal,
           s.last_busy_ts >= h.start_ts AND s.last_busy_ts > $window_start AS busy_recent,
           coalesce(s.last_sample_ts >= $data_since AND s.covered_since <= $window_start,
                    false) AS data_ok,
           greatest(h.start_ts, s.covered_since, s.last_busy_ts) AS gpu_idle_since,
           CASE WHEN s.last_busy_ts >= h.start_ts THEN s.last_busy_ts END AS busy_ts
    FROM held AS h LEFT JOIN state AS s ON s.uuid = h.gpu_uuid
    WHERE h.namespace || '/' || h.pod NOT IN (SELECT key FROM protected_pods)
),
per_workload AS (
    SELECT namespace, pod, container,
           string_agg(DISTINCT node, ',' ORDER BY node) AS node,
           any_value(kind) AS kind, bool_or(interactive) AS interactive,
           min(start_ts) AS start_ts, count(*) AS gpus,
           list(gpu_uuid ORDER BY gpu_uuid) AS gpu_uuids,
           coalesce(bool_or(busy_recent), false) AS busy_recent,
           bool_and(data_ok) AS data_ok,
           max(gpu_idle_since) AS idle_since,
           arg_max(last_busy_value, busy_ts) AS last_busy_value,
           string_agg(DISTINCT signal, ',' ORDER BY signal) AS signal
    FROM per_gpu GROUP BY namespace, pod, container
)
SELECT namespace, pod, container, node, kind, interactive, start_ts, gpus, gpu_uuids,
       idle_since, last_busy_value, signal,
       CASE WHEN start_ts > $grace_start THEN 'starting'
            WHEN busy_recent THEN 'active'
            WHEN NOT data_ok THEN 'unknown'
            WHEN idle_since <= $window_start THEN 'idle'
            ELSE 'active' END AS status
FROM per_workload
ORDER BY namespace, pod, container;
