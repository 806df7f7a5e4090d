-- Named queries of analytics/queueing/quota.py (and the weekly report's over-quota hours). Each
-- query follows its own name line; parameters are bound: $at (the time analysed), $lo
-- (the start of the fairness window), $start/$end (a report's range). {quota_state} is
-- filled in from the block of that name at load: the report's definition of guarantee,
-- use and demand at each instant `t` of an `instants` CTE the query defines first (pods
-- charged to the ClusterQueue of their LocalQueue as analytics/queueing/queues.py charges them).

-- name: quota_state
-- Per instant t and project: its guarantee, borrowing limit and over-quota weight, GPUs
-- held, unscheduled demand. Inventory tables are histories: the version valid at t is the
-- one with valid_from <= t < valid_to (NULL valid_to: still current).
quota_rows AS (
    SELECT i.t, q.record->>'project' AS project,
           coalesce(q.record->>'source', '') AS source,
           coalesce(TRY_CAST(q.record->>'guaranteed_gpus' AS DOUBLE), 0) AS guaranteed,
           TRY_CAST(q.record->>'borrowing_limit' AS DOUBLE) AS borrowing_limit,
           TRY_CAST(q.record->>'over_quota_weight' AS DOUBLE) AS weight
    FROM instants AS i JOIN quotas AS q
      ON q.valid_from <= i.t AND (q.valid_to IS NULL OR q.valid_to > i.t)
    -- LocalQueues hold no quota (they name the ClusterQueue that does); a Cohort's own
    -- quota is shared by its queues, nobody's guarantee
    WHERE coalesce(q.record->>'source', '') NOT IN ('kueue-localqueue', 'kueue-cohort', 'kueue-flavor')
),
local_queues AS (
    -- a pod's kueue.x-k8s.io/queue-name names a LocalQueue in its namespace, whose
    -- spec.clusterQueue is the project its GPUs are charged to (analytics/queueing/queues.py)
    SELECT i.t, q.record->>'namespace' AS namespace, q.record->>'project' AS name,
           nullif(q.record->>'cluster_queue', '') AS cluster_queue
    FROM instants AS i JOIN quotas AS q
      ON q.valid_from <= i.t AND (q.valid_to IS NULL OR q.valid_to > i.t)
    WHERE q.record->>'source' = 'kueue-localqueue'
),
per_source AS (
    -- the ResourceQuotas of one project's namespaces add up ...
    SELECT t, project, source, sum(guaranteed) AS guaranteed,
           max(borrowing_limit) AS borrowing_limit, max(weight) AS weight
    FROM quota_rows GROUP BY t, project, source
),
guarantees AS (
    -- ... while two sources describing one project (a Kueue queue and the config) are the
    -- same guarantee told twice: the larger counts, never their sum.
    SELECT t, project, max(guaranteed) AS guaranteed_gpus,
           max(borrowing_limit) AS borrowing_limit, max(weight) AS weight
    FROM per_source GROUP BY t, project
),
pod_fields AS (
    -- each pod version's fields read out of its JSON once, before the join with the
    -- instants: the join then carries a few typed columns, not every record once an
    -- instant (a week's half-hourly instants held 100 MB of records at once)
    SELECT p.valid_from, p.valid_to,
           p.record->>'namespace' AS namespace,
           nullif(p.record->>'project', '') AS project,
           p.record->>'phase' AS phase,
           nullif(p.record->>'node', '') AS node,
           coalesce(TRY_CAST(p.record->>'gpu_request' AS DOUBLE), 0)
             + coalesce(TRY_CAST(p.record->>'gpu_fraction' AS DOUBLE), 0)
               * coalesce(TRY_CAST(p.record->>'fraction_devices' AS DOUBLE), 1) AS gpus,
           p.record->'labels'->>'kueue.x-k8s.io/queue-name' AS queue_name
    FROM inventory_pods AS p
),
quota_pods AS (
    SELECT i.t,
           coalesce(lq.cluster_queue, p.project, p.namespace) AS project,
           p.phase, p.node, p.gpus, p.valid_from
    FROM instants AS i JOIN pod_fields AS p
      ON p.valid_from <= i.t AND (p.valid_to IS NULL OR p.valid_to > i.t)
    LEFT JOIN local_queues AS lq
      ON lq.t = i.t AND lq.namespace = p.namespace AND lq.name = p.queue_name
),
demand AS (
    -- held: bound to a node and not finished (a Pending pod bound to a node already holds
    -- its GPUs); pending: not yet bound, i.e. waiting for GPUs.
    SELECT t, project,
           coalesce(sum(gpus) FILTER (WHERE node IS NOT NULL
                                      AND phase IN ('Running', 'Pending')), 0) AS used_gpus,
           coalesce(sum(gpus) FILTER (WHERE node IS NULL AND phase = 'Pending'), 0)
               AS pending_gpus,
           count(*) FILTER (WHERE node IS NULL AND phase = 'Pending') AS pending_pods,
           coalesce(max(gpus) FILTER (WHERE node IS NULL AND phase = 'Pending'), 0)
               AS largest_pending_gpus,
           min(valid_from) FILTER (WHERE node IS NULL AND phase = 'Pending') AS pending_since
    FROM quota_pods WHERE gpus > 0
    GROUP BY t, project
),
quota_state AS (
    SELECT t, project,
           -- a project no quota covers has no guarantee to be over (the report's "over
           -- guarantee" only where a quota exists)
           g.guaranteed_gpus IS NOT NULL AS has_quota,
           coalesce(g.guaranteed_gpus, 0) AS guaranteed_gpus, g.borrowing_limit, g.weight,
           coalesce(d.used_gpus, 0) AS used_gpus,
           coalesce(d.pending_gpus, 0) AS pending_gpus,
           coalesce(d.pending_pods, 0) AS pending_pods,
           coalesce(d.largest_pending_gpus, 0) AS largest_pending_gpus,
           d.pending_since
    FROM guarantees AS g FULL JOIN demand AS d USING (t, project)
    WHERE project IS NOT NULL
)

-- name: pods_at
-- Every pod version valid at $at (the queue model charges and judges them).
SELECT CAST(record AS VARCHAR), epoch(valid_from) FROM inventory_pods
WHERE valid_from <= $at AND (valid_to IS NULL OR valid_to > $at);

-- name: quotas_at
-- Every quota and queue object valid at $at: ClusterQueues, LocalQueues, Cohorts, KAI
-- Queues, ResourceQuotas and the settings' guarantees.
SELECT CAST(record AS VARCHAR), epoch(valid_from) FROM quotas
WHERE valid_from <= $at AND (valid_to IS NULL OR valid_to > $at);

-- name: nodes_at
-- Every node record valid at $at: its labels tell which Kueue ResourceFlavor a running
-- pod's GPUs are of (analytics/queueing/queue_flavors.py).
SELECT CAST(record AS VARCHAR), epoch(valid_from) FROM inventory_nodes
WHERE valid_from <= $at AND (valid_to IS NULL OR valid_to > $at);

-- name: gpus_at
-- The GPUs the ready nodes valid at $at offer (KAI's over-quota share draws on what is
-- free; its fair shares divide them).
SELECT coalesce(sum(TRY_CAST(record->>'allocatable_gpus' AS DOUBLE)), 0)
FROM inventory_nodes
WHERE valid_from <= $at AND (valid_to IS NULL OR valid_to > $at)
  AND coalesce(TRY_CAST(record->>'ready' AS BOOLEAN), true);

-- name: pod_gpu_hours
-- GPU-hours each pod held over [$lo, $at], with its last version's record (the queue
-- model charges it to its queue): a pod's containers on one GPU count once (its first
-- container's intervals), an interval still open counts up to $at, a fractional pod its
-- fraction of the GPU, a fleet summary's workload key every GPU it holds ({held_gpus}).
WITH pod_versions AS (
    SELECT key, record, TRY_CAST(record->>'gpu_fraction' AS DOUBLE) AS fraction
    FROM inventory_pods
    WHERE valid_from <= $at AND (valid_to IS NULL OR valid_to > $lo)
    QUALIFY row_number() OVER (PARTITION BY key ORDER BY valid_from DESC) = 1
),
held_intervals AS (
    SELECT namespace, pod, gpu_uuid, project, {held_gpus} AS gpus,
           greatest(start_ts, $lo) AS s,
           least(coalesce(end_ts, $at), $at) AS e
    FROM workload_intervals
    WHERE start_ts < $at AND (end_ts IS NULL OR end_ts > $lo)
    QUALIFY container = min(container) OVER (PARTITION BY namespace, pod, gpu_uuid)
)
SELECT h.namespace, h.pod, any_value(h.project) AS project,
       CAST(any_value(v.record) AS VARCHAR) AS record,
       sum(greatest(epoch(h.e) - epoch(h.s), 0) * h.gpus * coalesce(v.fraction, 1.0)) / 3600.0
           AS gpu_hours
FROM held_intervals AS h
LEFT JOIN pod_versions AS v ON v.key = h.namespace || '/' || h.pod
GROUP BY h.namespace, h.pod
ORDER BY h.namespace, h.pod;

-- name: over_quota_over
-- Over-quota use over [$start, $end), by the detector's own definition at every instant
-- the pods or quotas change (each state held until the next change): per project, the
-- GPU-hours over its guarantee and the hours it was over.
WITH points AS (
    SELECT DISTINCT t FROM (
        SELECT valid_from AS t FROM inventory_pods
        UNION ALL SELECT valid_to FROM inventory_pods
        UNION ALL SELECT valid_from FROM quotas
        UNION ALL SELECT valid_to FROM quotas
    )
    WHERE t > $start AND t < $end
    UNION SELECT CAST($start AS TIMESTAMP)
),
instants AS (
    SELECT t, lead(t, 1, CAST($end AS TIMESTAMP)) OVER (ORDER BY t) AS until FROM points
),
{quota_state}
SELECT s.project,
       sum(greatest(s.used_gpus - s.guaranteed_gpus, 0) * (epoch(i.until) - epoch(i.t)))
           / 3600.0 AS gpu_hours_over_guarantee,
       coalesce(sum(epoch(i.until) - epoch(i.t))
                    FILTER (WHERE s.used_gpus - s.guaranteed_gpus > 1e-6), 0) / 3600.0
           AS hours_over_guarantee
FROM quota_state AS s JOIN instants AS i USING (t)
WHERE s.has_quota
GROUP BY s.project;
