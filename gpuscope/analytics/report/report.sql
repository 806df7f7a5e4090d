-- Named queries of analytics/report/data.py (the weekly report). Each query follows its own
-- name line. Parameters are bound: $lo (start of the previous week: the report compares),
-- $start/$end (the reported week, [start, end)), $frontier (how far the 5-minute roll-ups
-- are complete: buckets before it come from samples_5m, raw samples from it on),
-- $threshold (analytics.idle_utilization_below); $seen_lo/$seen_start ($lo/$start less
-- LAST_SEEN_LAG_S, report/inputs.py: series.last_seen lags a series' newest sample by up
-- to that much, collector/storage/writer_log.py) prefilter series by last_seen.

-- name: create_held
-- Who held which GPU in [$held_lo, $held_end), one row per pod, GPU and interval (a pod's
-- containers on one GPU count once: its first container's intervals); an interval still
-- open counts to $held_end. The held range is the report's [$lo, $end) widened by the gap
-- rule's margin either side (report/inputs.py): hourly_use judges a gap at the range's
-- edge by the pod's buckets past it, as it does inside the range, and counts only pieces
-- in [$lo, $end); the pods query clips to the week. `share` is the pod's fraction of the
-- GPU (from the last inventory version of the pod seen), 1 for a whole GPU; `gpus` the GPUs
-- the interval stands for (1 a GPU; under fleet summaries a workload key's interval stands
-- for every GPU it holds: collector/storage/held_gpus.py). Project: the
-- ClusterQueue of the pod's Kueue LocalQueue (analytics/queueing/queues.py), else the
-- interval's, else the pod's, else its namespace.
CREATE OR REPLACE TEMP TABLE report_held AS
WITH pod_versions AS (
    SELECT key,
           TRY_CAST(record->>'gpu_fraction' AS DOUBLE) AS fraction,
           nullif(record->>'project', '') AS project,
           record->'labels'->>'kueue.x-k8s.io/queue-name' AS local_queue
    FROM inventory_pods
    WHERE valid_from < $end AND (valid_to IS NULL OR valid_to > $lo)
    QUALIFY row_number() OVER (PARTITION BY key ORDER BY valid_from DESC) = 1
),
local_queues AS (
    SELECT record->>'namespace' AS namespace, record->>'project' AS name,
           nullif(record->>'cluster_queue', '') AS cluster_queue
    FROM quotas
    WHERE record->>'source' = 'kueue-localqueue'
      AND valid_from < $end AND (valid_to IS NULL OR valid_to > $lo)
    QUALIFY row_number() OVER (PARTITION BY key ORDER BY valid_from DESC) = 1
),
held AS (
    SELECT namespace, pod, gpu_uuid, node, kind, interactive, project, {held_gpus} AS gpus,
           {summary_row} AS summary,
           greatest(start_ts, $held_lo) AS s,
           least(coalesce(end_ts, $held_end), $held_end) AS e
    FROM workload_intervals
    WHERE start_ts < $held_end AND (end_ts IS NULL OR end_ts > $held_lo)
    QUALIFY container = min(container) OVER (PARTITION BY namespace, pod, gpu_uuid)
)
SELECT h.namespace, h.pod, h.gpu_uuid AS uuid, h.node, h.kind,
       coalesce(h.interactive, false) OR coalesce(h.kind = 'interactive', false)
           AS interactive,
       coalesce(lq.cluster_queue, nullif(h.project, ''), v.project, h.namespace) AS project,
       least(greatest(coalesce(v.fraction, 1.0), 0.0), 1.0) AS share, h.gpus, h.summary,
       h.s, h.e
FROM held AS h
LEFT JOIN pod_versions AS v ON v.key = h.namespace || '/' || h.pod
LEFT JOIN local_queues AS lq ON lq.namespace = h.namespace AND lq.name = v.local_queue
WHERE h.e > h.s;

-- name: hourly_use
-- One chunk of the range: hours in [$c0, $c1), judged from the buckets of [$r0, $r1),
-- the chunk and the margin either side that a gap's neighbours can be in (a gap longer
-- than MAX_BRIDGED_GAP is never bridged; analytics/report/data.py sets the margin), so
-- that memory is bounded by the chunk (a fortnight of 10,000 GPUs in one query spilled
-- gigabytes past collector.db_memory_limit).
-- Per hour and pod: GPU-hours allocated (share x time held), used (allocated x the GPU's
-- mean utilization in each 5-minute bucket), idle (allocated in buckets where the pod was
-- idle by the idle detector's definition, below) and without data (allocated in buckets
-- with no sample of the GPU: unknown, never counted idle, unless the nearest buckets
-- with data on both sides are idle: then the pod was idle through the gap, by the rule
-- analytics/detectors/idle_gaps.py shares with the idle detector). Held time is cut into 5-minute
-- buckets and each piece joined to its GPU's bucket. For speed, joins and groups are on
-- integers: a dense GPU id and the bucket number fold into one key, pods are numbered,
-- and labels join at the end.
-- Idle, as analytics/detectors/idle.py decides it: the bucket's highest busy signal under
-- $threshold. The busy signal is DCGM SM activity where the GPU reports it, NVML
-- utilization otherwise (with $memory, memory-controller activity too); a fractional
-- pod (share under 1) is judged on its own per-process utilization over its share where
-- the agents report it (a 0.25-GPU pod at 4.8 % of the whole GPU is at 19 % of its
-- share: busy), else on its GPU's signal.
WITH util_series AS (
    SELECT series_id, uuid
    FROM series
    WHERE metric = 'gpuscope_gpu_utilization_ratio' AND uuid IS NOT NULL AND uuid <> ''
      AND last_seen >= $seen_lo AND first_seen < $end
),
gpu_ids AS (
    SELECT uuid, row_number() OVER (ORDER BY uuid) AS gid
    FROM (SELECT DISTINCT uuid FROM util_series)
),
util_ids AS (
    -- `multi`: the GPU has more than one series (relabelled), whose buckets must merge
    SELECT u.series_id, g.gid, count(*) OVER (PARTITION BY g.gid) > 1 AS multi
    FROM util_series AS u JOIN gpu_ids AS g USING (uuid)
),
rolled AS (
    SELECT i.gid, i.multi, r.bucket, r.sum, r.count, r.max
    FROM samples_5m AS r JOIN util_ids AS i USING (series_id)
    WHERE r.bucket >= $r0 AND r.bucket < $r1 AND r.bucket < $frontier
),
util AS (
    -- a roll-up row of a GPU's only series is already its bucket: no grouping needed
    SELECT gid * 1048576 + (epoch(bucket) // 300)::BIGINT % 1048576 AS k,
           sum / count AS mean, max AS peak
    FROM rolled WHERE NOT multi
    UNION ALL
    SELECT gid * 1048576 + (epoch(bucket) // 300)::BIGINT % 1048576,
           sum(s) / sum(c), max(m)
    FROM (
        SELECT gid, bucket, sum AS s, count AS c, max AS m FROM rolled WHERE multi
        UNION ALL
        SELECT i.gid, time_bucket(INTERVAL 5 MINUTE, x.ts), x.value, 1, x.value
        FROM samples AS x JOIN util_ids AS i USING (series_id)
        WHERE x.ts >= $r0 AND x.ts < $r1 AND x.ts >= $frontier
    )
    GROUP BY gid, bucket
),
signal_series AS (
    -- SM activity (sm) and, with $memory, memory-controller activity (NOT sm) per GPU;
    -- `multi`: the GPU has more than one (both signals, or one relabelled)
    SELECT x.series_id, g.gid, x.metric = 'gpuscope_gpu_sm_active_ratio' AS sm,
           count(*) OVER (PARTITION BY g.gid) > 1 AS multi
    FROM series AS x JOIN gpu_ids AS g USING (uuid)
    WHERE (x.metric = 'gpuscope_gpu_sm_active_ratio'
           OR ($memory AND x.metric = 'gpuscope_gpu_memory_utilization_ratio'))
      AND x.last_seen >= $seen_lo AND x.first_seen < $end
),
signal_rolled AS (
    SELECT i.gid, i.sm, i.multi, r.bucket, r.max AS m
    FROM samples_5m AS r JOIN signal_series AS i USING (series_id)
    WHERE r.bucket >= $r0 AND r.bucket < $r1 AND r.bucket < $frontier
),
signals AS (
    -- as util: a roll-up row of a GPU's only signal series is already its bucket
    SELECT gid * 1048576 + (epoch(bucket) // 300)::BIGINT % 1048576 AS k,
           CASE WHEN sm THEN m END AS sm_peak, CASE WHEN NOT sm THEN m END AS memory_peak
    FROM signal_rolled WHERE NOT multi
    UNION ALL
    SELECT gid * 1048576 + (epoch(bucket) // 300)::BIGINT % 1048576,
           max(m) FILTER (WHERE sm), max(m) FILTER (WHERE NOT sm)
    FROM (
        SELECT gid, sm, bucket, m FROM signal_rolled WHERE multi
        UNION ALL
        SELECT i.gid, i.sm, time_bucket(INTERVAL 5 MINUTE, x.ts), x.value
        FROM samples AS x JOIN signal_series AS i USING (series_id)
        WHERE x.ts >= $r0 AND x.ts < $r1 AND x.ts >= $frontier
    )
    GROUP BY gid, bucket
),
mean_series AS (
    -- fleet summaries: a workload's GPUs' mean NVML utilization in the bucket (over the
    -- bucket and its GPUs: collector/querying/fleet_summaries.py, UTILIZATION_MEAN),
    -- which "used" takes for each GPU it holds, so their sum is the GPUs' own (its busy
    -- peak is SM activity where there is some, and a peak: no GPU's mean)
    SELECT x.series_id, g.gid
    FROM series AS x JOIN gpu_ids AS g USING (uuid)
    WHERE x.metric = 'gpuscope:workload_utilization_mean'
      AND x.last_seen >= $seen_lo AND x.first_seen < $end
),
summary_means AS (
    -- one sample a bucket (a summary): its roll-up's max is the sample
    SELECT gid * 1048576 + (epoch(bucket) // 300)::BIGINT % 1048576 AS k, max(m) AS used_mean
    FROM (
        SELECT i.gid, r.bucket, r.max AS m
        FROM samples_5m AS r JOIN mean_series AS i USING (series_id)
        WHERE r.bucket >= $r0 AND r.bucket < $r1 AND r.bucket < $frontier
        UNION ALL
        SELECT i.gid, time_bucket(INTERVAL 5 MINUTE, x.ts), x.value
        FROM samples AS x JOIN mean_series AS i USING (series_id)
        WHERE x.ts >= $r0 AND x.ts < $r1 AND x.ts >= $frontier
    )
    GROUP BY gid, bucket
),
pods AS (
    SELECT namespace, pod, project, row_number() OVER (ORDER BY namespace, pod) AS pid
    FROM (SELECT DISTINCT namespace, pod, project FROM report_held)
),
share_series AS (
    -- fractional pods' own utilization on each GPU they share
    SELECT x.series_id, g.gid, p.pid
    FROM series AS x
    JOIN gpu_ids AS g USING (uuid)
    JOIN pods AS p ON p.namespace = x.namespace AND p.pod = x.pod
    WHERE x.metric = 'gpuscope_gpu_workload_utilization_ratio'
      AND x.last_seen >= $seen_lo AND x.first_seen < $end
      AND (x.namespace, x.pod) IN (SELECT (namespace, pod) FROM report_held WHERE share < 1)
),
share_util AS (
    SELECT pid, gid * 1048576 + (epoch(bucket) // 300)::BIGINT % 1048576 AS k, max(m) AS peak
    FROM (
        SELECT i.pid, i.gid, r.bucket, r.max AS m
        FROM samples_5m AS r JOIN share_series AS i USING (series_id)
        WHERE r.bucket >= $r0 AND r.bucket < $r1 AND r.bucket < $frontier
        UNION ALL
        SELECT i.pid, i.gid, time_bucket(INTERVAL 5 MINUTE, x.ts), x.value
        FROM samples AS x JOIN share_series AS i USING (series_id)
        WHERE x.ts >= $r0 AND x.ts < $r1 AND x.ts >= $frontier
    )
    GROUP BY pid, gid, bucket
),
spans AS (
    SELECT p.pid, h.share, h.gpus, h.s, h.e, g.gid,
           unnest(range(time_bucket(INTERVAL 5 MINUTE, greatest(h.s, $r0)), least(h.e, $r1),
                        INTERVAL 5 MINUTE)) AS bucket
    FROM report_held AS h
    JOIN pods AS p USING (namespace, pod, project)
    LEFT JOIN gpu_ids AS g USING (uuid)
    WHERE h.e > $r0 AND h.s < $r1
),
pieces AS (
    -- held time counts only inside [$lo, $end); pieces past it (report_held reaches the
    -- gap margin beyond) are there as a gap's neighbours, and per_pod never sums them;
    -- a fleet summary's workload key counts every GPU it holds (`gpus`), each judged by
    -- the workload's busy peak: idle when the peak is under $threshold (every GPU it
    -- holds is then idle); used is its GPUs' mean utilization for each (summary_means)
    SELECT pid, gid, bucket, share,
           gid * 1048576 + (epoch(bucket) // 300)::BIGINT % 1048576 AS k,
           share * gpus * greatest(0, epoch(least(e, $end, bucket + INTERVAL 5 MINUTE))
                               - epoch(greatest(s, $lo, bucket))) / 3600.0 AS gpu_hours
    FROM spans
),
judged AS (
    SELECT p.pid, p.gid, p.bucket, p.gpu_hours, coalesce(pk.used_mean, u.mean) AS mean,
           u.k IS NULL AND b.k IS NULL AND w.k IS NULL AS gap,
           CASE WHEN p.share < 1 AND w.peak IS NOT NULL THEN w.peak / p.share
                ELSE greatest(coalesce(b.sm_peak, u.peak), b.memory_peak) END AS busy
    FROM pieces AS p
    LEFT JOIN util AS u USING (k)
    LEFT JOIN signals AS b USING (k)
    LEFT JOIN share_util AS w ON w.pid = p.pid AND w.k = p.k
    LEFT JOIN summary_means AS pk ON pk.k = p.k
),
gap_parts AS (
    -- the (pod, GPU) pairs with a bucket without data: only their rows need the
    -- neighbours (a fortnight of 10,000 GPUs is 40 M pieces; ordering them all for the
    -- windows below was most of the query and spilled past the memory limit)
    SELECT DISTINCT pid, coalesce(gid, 0) AS g FROM judged WHERE gap
),
sides AS (
    -- a bucket without data is judged by the nearest buckets with data on both sides
    SELECT *,
           last_value(busy >= $threshold IGNORE NULLS) OVER (
               PARTITION BY pid, gid ORDER BY bucket
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before_busy,
           first_value(busy >= $threshold IGNORE NULLS) OVER (
               PARTITION BY pid, gid ORDER BY bucket
               ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS after_busy,
           epoch(first_value(CASE WHEN NOT gap THEN bucket END IGNORE NULLS) OVER (
                     PARTITION BY pid, gid ORDER BY bucket
                     ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING))
               - epoch(last_value(CASE WHEN NOT gap THEN bucket END IGNORE NULLS) OVER (
                     PARTITION BY pid, gid ORDER BY bucket
                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) - 300 AS gap_s
    FROM judged
    WHERE (pid, coalesce(gid, 0)) IN (SELECT (pid, g) FROM gap_parts)
),
bridged AS (
    SELECT pid, bucket, gpu_hours, mean, busy,
           gap AND {bridged} AS idle_through, gap AND NOT {bridged} AS no_data
    FROM sides
    UNION ALL
    SELECT pid, bucket, gpu_hours, mean, busy, false, false
    FROM judged
    WHERE (pid, coalesce(gid, 0)) NOT IN (SELECT (pid, g) FROM gap_parts)
),
per_pod AS (
    SELECT time_bucket(INTERVAL 1 HOUR, bucket) AS hour, pid,
           sum(gpu_hours) AS allocated,
           coalesce(sum(gpu_hours * mean), 0) AS used,
           coalesce(sum(gpu_hours) FILTER (WHERE busy < $threshold OR idle_through), 0)
               AS idle,
           coalesce(sum(gpu_hours) FILTER (WHERE no_data), 0) AS no_data
    FROM bridged
    WHERE bucket >= $c0 AND bucket < $c1
    GROUP BY ALL
)
SELECT x.hour, p.namespace, p.pod, p.project, x.allocated, x.used, x.idle, x.no_data
FROM per_pod AS x JOIN pods AS p USING (pid);

-- name: held_gpus
-- How many GPUs report_held holds (hourly_use sizes its chunks by it), and how many of
-- them under fleet summaries (a workload key counts the GPUs it holds).
SELECT coalesce(sum(gpus), 0), coalesce(sum(gpus) FILTER (WHERE summary), 0)
FROM (SELECT uuid, max(gpus) AS gpus, bool_or(summary) AS summary
      FROM report_held GROUP BY uuid);

-- name: pods
-- What the report says about each pod held in the week: kind, nodes, GPUs held (shares
-- over its distinct GPUs) and what names its owner: its labels (as JSON text) and its
-- controller; gpuscope/analytics/report/data.py picks the owner (workloads.owner_label_keys).
WITH owners AS (
    SELECT key, CAST(record->'labels' AS VARCHAR) AS pod_labels,
           record->>'owner_kind' AS owner_kind, record->>'owner_name' AS owner_name
    FROM inventory_pods
    WHERE valid_from < $end AND (valid_to IS NULL OR valid_to > $start)
    QUALIFY row_number() OVER (PARTITION BY key ORDER BY valid_from DESC) = 1
),
per_gpu AS (
    SELECT namespace, pod, uuid, max(share * gpus) AS share
    FROM report_held WHERE e > $start AND s < $end GROUP BY ALL
),
gpus AS (
    SELECT namespace, pod, sum(share) AS gpus FROM per_gpu GROUP BY ALL
)
SELECT h.namespace, h.pod, any_value(h.project) AS project,
       coalesce(any_value(h.kind), 'unknown') AS kind,
       bool_or(h.interactive) AS interactive,
       string_agg(DISTINCT h.node, ',' ORDER BY h.node) AS nodes,
       any_value(g.gpus) AS gpus,
       greatest(min(h.s), $lo) AS first_held, least(max(h.e), $end) AS last_held,
       any_value(o.pod_labels) AS pod_labels, any_value(o.owner_kind) AS owner_kind,
       any_value(o.owner_name) AS owner_name
FROM report_held AS h
JOIN gpus AS g USING (namespace, pod)
LEFT JOIN owners AS o ON o.key = h.namespace || '/' || h.pod
WHERE h.e > $start AND h.s < $end
GROUP BY h.namespace, h.pod;

-- name: gpu_models
-- GPUs per model on the week's nodes (each node's last version in the week): what the
-- estimated price per GPU-hour weighs when the site has set none.
SELECT coalesce(record->>'gpu_model', '') AS model,
       sum(coalesce(TRY_CAST(record->>'allocatable_gpus' AS DOUBLE), 0)) AS gpus
FROM (
    SELECT record FROM inventory_nodes
    WHERE valid_from < $end AND (valid_to IS NULL OR valid_to > $start)
    QUALIFY row_number() OVER (PARTITION BY key ORDER BY valid_from DESC) = 1
)
GROUP BY ALL;

-- name: capacity
-- GPUs the nodes offered (allocatable whole GPUs) per hour of [$lo, $end), from the
-- inventory history: GPU-hours per hour.
WITH versions AS (
    SELECT coalesce(TRY_CAST(record->>'allocatable_gpus' AS DOUBLE), 0) AS gpus,
           greatest(valid_from, $lo) AS s,
           least(coalesce(valid_to, $end), $end) AS e
    FROM inventory_nodes
    WHERE valid_from < $end AND (valid_to IS NULL OR valid_to > $lo)
),
hours AS (
    SELECT gpus, s, e, unnest(range(time_bucket(INTERVAL 1 HOUR, s), e, INTERVAL 1 HOUR)) AS hour
    FROM versions WHERE e > s AND gpus > 0
)
SELECT hour,
       sum(gpus * (epoch(least(e, hour + INTERVAL 1 HOUR)) - epoch(greatest(s, hour))))
           / 3600.0 AS capacity
FROM hours GROUP BY hour;

-- name: guarantees
-- Each project's guarantee at the start of every hour of [$start, $end): the quota
-- versions valid then; one project's ResourceQuotas over several namespaces add up, two
-- sources describing it count once (the larger), as in analytics/sql/quota.sql.
WITH hours AS (
    SELECT unnest(range($start, $end, INTERVAL 1 HOUR)) AS hour
),
rows AS (
    SELECT h.hour, q.record->>'project' AS project,
           coalesce(q.record->>'source', '') AS source,
           coalesce(TRY_CAST(q.record->>'guaranteed_gpus' AS DOUBLE), 0) AS guaranteed
    FROM hours AS h JOIN quotas AS q
      ON q.valid_from <= h.hour AND (q.valid_to IS NULL OR q.valid_to > h.hour)
    WHERE coalesce(q.record->>'source', '') NOT IN ('kueue-localqueue', 'kueue-cohort', 'kueue-flavor')
),
per_source AS (
    SELECT hour, project, source, sum(guaranteed) AS guaranteed FROM rows GROUP BY ALL
)
SELECT hour, project, max(guaranteed) AS guaranteed
FROM per_source WHERE project IS NOT NULL GROUP BY hour, project;

-- name: ib_hot_ports
-- InfiniBand ports that were hot in the week: 5-minute buckets where a direction's
-- throughput (the bucket's counter increase over 300 s) was at or over $hot of the link
-- rate (the rate gauge's highest value in the week). A bucket stands for the detector's
-- window (analytics.ib_hot_window_minutes, 5 by default). Rows are judged one by one and
-- summed per port and direction (no group per bucket: a week of 10,000 ports is 40 M
-- rows); only the hot buckets are grouped, to count a bucket hot in both directions once.
WITH ib AS (
    SELECT series_id, node, device, port,
           CASE metric WHEN 'gpuscope_ib_transmit_bytes_total' THEN 0
                       WHEN 'gpuscope_ib_receive_bytes_total' THEN 1 ELSE 2 END AS k,
           dense_rank() OVER (ORDER BY node, device, port) AS port_id
    FROM series
    WHERE metric IN ('gpuscope_ib_transmit_bytes_total', 'gpuscope_ib_receive_bytes_total',
                     'gpuscope_ib_port_rate_bytes_per_second')
      AND last_seen >= $seen_start AND first_seen < $end
),
b AS (
    SELECT series_id, bucket, sum AS increase, max AS peak
    FROM samples_5m
    WHERE bucket >= $start AND bucket < $end AND bucket < $frontier
      AND series_id IN (SELECT series_id FROM ib)
    UNION ALL
    SELECT series_id, time_bucket(INTERVAL 5 MINUTE, ts), sum(value), max(value)
    FROM samples
    WHERE ts >= $start AND ts < $end AND ts >= $frontier
      AND series_id IN (SELECT series_id FROM ib)
    GROUP BY ALL
),
rows AS (
    SELECT i.port_id, i.k, b.bucket, b.increase, b.peak FROM b JOIN ib AS i USING (series_id)
),
rate AS (
    SELECT port_id, max(peak) AS rate FROM rows WHERE k = 2 GROUP BY port_id
),
judged AS (
    SELECT r.port_id, r.k, r.bucket, r.increase / 300.0 / t.rate AS ratio, t.rate
    FROM rows AS r JOIN rate AS t USING (port_id)
    WHERE r.k < 2 AND t.rate > 0
),
per_direction AS (
    SELECT port_id, k, count(*) AS buckets, avg(ratio) AS mean_ratio, max(ratio) AS peak_ratio,
           count(*) FILTER (WHERE ratio >= $hot) AS hot_buckets, any_value(rate) AS rate
    FROM judged GROUP BY port_id, k
),
hot AS (
    SELECT port_id, count(DISTINCT bucket) AS hot_buckets, min(bucket) AS first_hot,
           max(bucket) + INTERVAL 5 MINUTE AS last_hot
    FROM judged WHERE ratio >= $hot GROUP BY port_id
),
ports AS (
    SELECT port_id, max(buckets) AS buckets, max(mean_ratio) AS mean_ratio,
           max(peak_ratio) AS peak_ratio, any_value(rate) AS rate,
           arg_max(CASE k WHEN 0 THEN 'transmit' ELSE 'receive' END, hot_buckets)
               AS hot_direction
    FROM per_direction GROUP BY port_id
),
labels AS (SELECT DISTINCT port_id, node, device, port FROM ib)
SELECT l.node, l.device, l.port,
       h.hot_buckets * 300 / 3600.0 AS hot_hours,
       p.buckets * 300 / 3600.0 AS measured_hours,
       p.peak_ratio, p.mean_ratio, p.hot_direction, h.first_hot, h.last_hot,
       p.rate AS link_bytes_per_second
FROM hot AS h JOIN ports AS p USING (port_id) JOIN labels AS l USING (port_id)
ORDER BY hot_hours DESC, l.node, l.device, l.port;

-- name: actions
-- The action log of the week (actions/ writes it): one row per action, planned (dry
-- run) or carried out, with what its record says it freed.
SELECT id, ts, coalesce(record->>'action', kind) AS action, kind, finding_id, dry_run,
       coalesce(result, '') AS result,
       coalesce(record->>'namespace', '') AS namespace,
       coalesce(record->>'pod', '') AS pod,
       coalesce(record->>'node', '') AS node,
       TRY_CAST(record->>'gpus' AS DOUBLE) AS gpus,
       coalesce(record->>'policy', '') AS policy,
       coalesce(record->>'reason', '') AS reason,
       TRY_CAST(record->>'gpu_hours_freed' AS DOUBLE) AS gpu_hours_freed
FROM actions
WHERE ts >= $start AND ts < $end
ORDER BY ts, id;

-- name: inventory_changes
-- Every instant in ($start, $end) at which a node or pod version begins or ends: where
-- the allocation state (and so fragmentation) can change.
SELECT DISTINCT t FROM (
    SELECT valid_from AS t FROM inventory_nodes
    UNION ALL SELECT valid_to FROM inventory_nodes
    UNION ALL SELECT valid_from FROM inventory_pods
    UNION ALL SELECT valid_to FROM inventory_pods
)
WHERE t > $start AND t < $end
ORDER BY t;

-- name: node_versions
-- Node versions valid at some instant of [$start, $end) (for inventory_sweep.py: the
-- records nodes_at returns, for all the week's instants in one read).
SELECT key, record, valid_from, valid_to FROM inventory_nodes
WHERE valid_from < $end AND (valid_to IS NULL OR valid_to > $start);

-- name: pod_versions
SELECT key, record, valid_from, valid_to FROM inventory_pods
WHERE valid_from < $end AND (valid_to IS NULL OR valid_to > $start);

-- name: gpu_intervals
-- The workload intervals behind gpu_indices_at, for all the week's instants (a fleet
-- summary's `gpu` is a GPU count, not an index: left out, as gpu_indices_at does).
SELECT namespace || '/' || pod AS key, CAST(gpu AS INTEGER) AS gpu, start_ts, end_ts
FROM workload_intervals
WHERE start_ts < $end AND (end_ts IS NULL OR end_ts > $start)
  AND TRY_CAST(gpu AS INTEGER) IS NOT NULL AND NOT {summary_row};
