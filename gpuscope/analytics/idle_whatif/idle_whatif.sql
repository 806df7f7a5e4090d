-- Named queries of analytics/idle_whatif/read.py (the idle-policy replay). Each query
-- follows its own name line. Parameters are bound: $lo (the start of the look-back: the
-- range's start less the longest threshold, the start-up grace and the gap margin),
-- $start/$end (the replayed range, [start, end)), $frontier (how far the 5-minute roll-ups
-- are complete), $threshold/$memory (the idle detector's settings), $protected
-- (workloads.protected_namespaces), $every (replay every GPU workload, not only
-- interactive sessions). {busy_series} is the idle detector's own block of that name
-- (analytics/sql/idle.sql), {bridged} its gap rule (analytics/detectors/idle_gaps.py).

-- name: create_held
-- The sessions the replay can stop, one row per pod, GPU and interval held in
-- [$lo, $end) (a pod's containers on one GPU count once: its first container's intervals),
-- clipped to it (s, e), with the interval's real start and end.
-- An interactive session is a pod any of whose intervals says so (interactive, or kind
-- interactive), as the idle detector reads it; with $every every GPU pod. Protected
-- namespaces and pods (the pod's record says protected, or gpuscope.io/protect=true) are
-- left out: no policy ever touches them. `share`: the GPUs held, a fractional pod's fraction
-- (a fleet summary's workload key: every GPU it holds, collector/storage/held_gpus.py).
CREATE OR REPLACE TEMP TABLE whatif_idle_held AS
WITH pod_versions AS (
    SELECT key,
           TRY_CAST(record->>'gpu_fraction' AS DOUBLE) AS fraction,
           TIMESTAMP '1970-01-01' + to_seconds(TRY_CAST(record->>'start_time' AS DOUBLE))
               AS pod_start,
           CAST(record->'labels' AS VARCHAR) AS pod_labels,
           record->>'owner_kind' AS owner_kind, record->>'owner_name' AS owner_name
    FROM inventory_pods
    WHERE valid_from < $end AND (valid_to IS NULL OR valid_to > $lo)
    QUALIFY row_number() OVER (PARTITION BY key ORDER BY valid_from DESC) = 1
),
protected_pods AS (
    SELECT DISTINCT key FROM inventory_pods
    WHERE valid_from < $end AND (valid_to IS NULL OR valid_to > $lo)
      AND (coalesce(TRY_CAST((record->>'protected') AS BOOLEAN), false)
           OR coalesce((record->'labels'->>'gpuscope.io/protect') = 'true', false))
),
held AS (
    -- an interval never closed (the store's data stops: a copy, a collector stopped) is
    -- held until it was last seen (written once a minute) and a few minutes more, not to
    -- the range's end: its pod may be long gone
    SELECT namespace, pod, container, gpu_uuid, kind, interactive, project, start_ts,
           coalesce(end_ts, last_seen + INTERVAL 5 MINUTE) AS end_ts, {held_gpus} AS gpus
    FROM workload_intervals
    WHERE start_ts < $end AND coalesce(end_ts, last_seen + INTERVAL 5 MINUTE) > $lo
      AND NOT list_contains($protected, namespace)
    QUALIFY container = min(container) OVER (PARTITION BY namespace, pod, gpu_uuid)
),
chosen AS (
    SELECT namespace, pod FROM held GROUP BY ALL
    HAVING $every OR bool_or(coalesce(interactive, false) OR coalesce(kind = 'interactive', false))
)
SELECT dense_rank() OVER (ORDER BY h.namespace, h.pod) AS pid,
       h.namespace, h.pod, h.container, h.gpu_uuid AS uuid,
       -- GPUs held: a fraction of one, or every GPU a fleet summary's workload key holds
       CASE WHEN v.fraction > 0 AND v.fraction < 1 THEN v.fraction ELSE h.gpus END AS share,
       h.start_ts, h.end_ts,
       greatest(h.start_ts, $lo) AS s, least(h.end_ts, $end) AS e,
       h.kind, h.project, v.pod_start, v.pod_labels, v.owner_kind, v.owner_name
FROM held AS h
JOIN chosen USING (namespace, pod)
LEFT JOIN pod_versions AS v ON v.key = h.namespace || '/' || h.pod
WHERE h.namespace || '/' || h.pod NOT IN (SELECT key FROM protected_pods)
  AND least(h.end_ts, $end) > greatest(h.start_ts, $lo);

-- name: sessions
-- One row per session: its real start (its first interval's, or the pod's start time in
-- the inventory when earlier, as the idle detector takes it), its real end (NULL: held at
-- $end or later), whether it was held in [$start, $end) at all, and what names its owner.
SELECT pid, namespace, pod,
       coalesce(any_value(kind), 'unknown') AS kind,
       coalesce(any_value(nullif(project, '')), namespace) AS project,
       least(min(start_ts), coalesce(min(pod_start), min(start_ts))) AS started,
       CASE WHEN bool_or(end_ts >= $end) THEN NULL ELSE max(end_ts) END AS ended,
       bool_or(e > $start) AS in_range,
       any_value(pod_labels) AS pod_labels, any_value(owner_kind) AS owner_kind,
       any_value(owner_name) AS owner_name
FROM whatif_idle_held
GROUP BY pid, namespace, pod
ORDER BY pid;

-- name: held
-- What each session held, clipped to [$lo, $end): GPU share and interval.
SELECT pid, share, s, e FROM whatif_idle_held ORDER BY pid, s;

-- name: runs
-- Each session's life in [$lo, $end) as runs of one state: B (busy: a GPU it holds at or
-- over $threshold), I (idle: every GPU it holds under it, or idle through a gap by the
-- shared rule) and U (unknown: a GPU without data that the rule does not bridge), at the
-- 5-minute resolution of the roll-ups (raw samples past $frontier are bucketed alike).
-- The busy signal is the idle detector's (busy_series: SM activity where the GPU has it,
-- NVML utilization otherwise, memory activity with $memory; a fractional pod its own
-- utilization over its share where the agents report it, else its GPU's). A bucket's
-- highest value decides it, so a busy bucket counts as busy to its end (idle since is
-- never earlier than the detector's). Per run: its first and last instant held (t0, t1)
-- and the GPU-hours held in it inside [$start, $end). Held time is cut into 5-minute
-- pieces joined on integer keys (a dense GPU id and the bucket number), as the report's
-- hourly_use does.
WITH {busy_series},
gpu_ids AS (
    SELECT uuid, row_number() OVER (ORDER BY uuid) AS gid
    FROM (SELECT DISTINCT uuid FROM whatif_idle_held)
),
gpu_series AS (
    SELECT b.series_id, g.gid, b.share FROM busy_series AS b JOIN gpu_ids AS g ON g.uuid = b.key
),
own_keys AS (
    SELECT DISTINCT pid, uuid || '|' || namespace || '/' || pod || '/' || container AS key, uuid
    FROM whatif_idle_held WHERE share < 1
),
own_series AS (
    SELECT b.series_id, o.pid, g.gid, b.share
    FROM busy_series AS b JOIN own_keys AS o USING (key) JOIN gpu_ids AS g USING (uuid)
),
gpu_values AS (
    SELECT k, max(v) AS v
    FROM (
        SELECT i.gid * 1048576 + floor(epoch(r.bucket) / 300)::BIGINT % 1048576 AS k,
               r.max / i.share AS v
        FROM samples_5m AS r JOIN gpu_series AS i USING (series_id)
        WHERE r.bucket >= $lo5 AND r.bucket < $end AND r.bucket < $frontier
        UNION ALL
        SELECT i.gid * 1048576 + floor(epoch(x.ts) / 300)::BIGINT % 1048576, x.value / i.share
        FROM samples AS x JOIN gpu_series AS i USING (series_id)
        WHERE x.ts >= $lo5 AND x.ts < $end AND x.ts >= $frontier
    )
    GROUP BY k
),
own_values AS (
    SELECT pid, k, max(v) AS v
    FROM (
        SELECT i.pid, i.gid * 1048576 + floor(epoch(r.bucket) / 300)::BIGINT % 1048576 AS k,
               r.max / i.share AS v
        FROM samples_5m AS r JOIN own_series AS i USING (series_id)
        WHERE r.bucket >= $lo5 AND r.bucket < $end AND r.bucket < $frontier
        UNION ALL
        SELECT i.pid, i.gid * 1048576 + floor(epoch(x.ts) / 300)::BIGINT % 1048576,
               x.value / i.share
        FROM samples AS x JOIN own_series AS i USING (series_id)
        WHERE x.ts >= $lo5 AND x.ts < $end AND x.ts >= $frontier
    )
    GROUP BY pid, k
),
spans AS (
    SELECT h.pid, h.share, h.s, h.e, g.gid,
           unnest(range(time_bucket(INTERVAL 5 MINUTE, h.s), h.e, INTERVAL 5 MINUTE))
               AS bucket
    FROM whatif_idle_held AS h JOIN gpu_ids AS g USING (uuid)
),
judged AS (
    SELECT p.pid, p.gid, p.bucket,
           greatest(p.s, p.bucket) AS t0, least(p.e, p.bucket + INTERVAL 5 MINUTE) AS t1,
           p.share * greatest(0, epoch(least(p.e, $end, p.bucket + INTERVAL 5 MINUTE))
                                 - epoch(greatest(p.s, $start, p.bucket))) / 3600.0
               AS gpu_hours,
           coalesce(o.v, u.v) AS v
    FROM (SELECT *, gid * 1048576 + floor(epoch(bucket) / 300)::BIGINT % 1048576 AS k
          FROM spans) AS p
    LEFT JOIN gpu_values AS u USING (k)
    LEFT JOIN own_values AS o ON o.pid = p.pid AND o.k = p.k
),
gap_parts AS (
    -- only the (session, GPU) pairs with a bucket without data need their neighbours
    SELECT DISTINCT pid, gid FROM judged WHERE v IS NULL
),
sides AS (
    SELECT *,
           last_value(v >= $threshold IGNORE NULLS) OVER (
               PARTITION BY pid, gid ORDER BY bucket
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before_busy,
           first_value(v >= $threshold IGNORE NULLS) OVER (
               PARTITION BY pid, gid ORDER BY bucket
               ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS after_busy,
           epoch(first_value(CASE WHEN v IS NOT NULL THEN bucket END IGNORE NULLS) OVER (
                     PARTITION BY pid, gid ORDER BY bucket
                     ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING))
               - epoch(last_value(CASE WHEN v IS NOT NULL THEN bucket END IGNORE NULLS) OVER (
                     PARTITION BY pid, gid ORDER BY bucket
                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) - 300 AS gap_s
    FROM judged
    WHERE (pid, gid) IN (SELECT (pid, gid) FROM gap_parts)
),
states AS (
    SELECT pid, bucket, t0, t1, gpu_hours,
           CASE WHEN v >= $threshold THEN 2 WHEN v IS NOT NULL OR {bridged} THEN 0 ELSE 1 END
               AS state
    FROM sides
    UNION ALL
    SELECT pid, bucket, t0, t1, gpu_hours, CASE WHEN v >= $threshold THEN 2 ELSE 0 END
    FROM judged
    WHERE (pid, gid) NOT IN (SELECT (pid, gid) FROM gap_parts)
),
per_bucket AS (
    -- busy if any GPU is busy; else unknown if any is; else idle
    SELECT pid, bucket, min(t0) AS t0, max(t1) AS t1, sum(gpu_hours) AS gpu_hours,
           max(state) AS state
    FROM states GROUP BY pid, bucket
),
islands AS (
    SELECT *, floor(epoch(bucket) / 300)::BIGINT
                  - row_number() OVER (PARTITION BY pid, state ORDER BY bucket) AS island
    FROM per_bucket
)
SELECT pid, CASE state WHEN 2 THEN 'B' WHEN 1 THEN 'U' ELSE 'I' END AS state,
       min(t0) AS t0, max(t1) AS t1, sum(gpu_hours) AS gpu_hours
FROM islands
GROUP BY pid, state, island
ORDER BY pid, t0;

-- name: gpu_models
-- GPUs per model on the range's nodes (each node's last version in it): what the
-- estimated price per GPU-hour weighs when the site has set none (as the report's).
SELECT coalesce(record->>'gpu_model', '') AS model,
       sum(coalesce(TRY_CAST(record->>'allocatable_gpus' AS DOUBLE), 0)) AS gpus
FROM (
    SELECT record FROM inventory_nodes
    WHERE valid_from < $end AND (valid_to IS NULL OR valid_to > $start)
    QUALIFY row_number() OVER (PARTITION BY key ORDER BY valid_from DESC) = 1
)
GROUP BY ALL;
