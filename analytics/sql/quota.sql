-- Named queries of analytics/quota.py. Each query follows its own name line; parameters
-- are bound: $at (the time analysed), $lo (the start of the fairness window).

-- name: quota_projects
-- One row per project as of $at: its guarantee, GPUs held, unscheduled demand, and its
-- GPU-hours over [$lo, $at]. Inventory tables are histories: the version valid at $at is
-- the one with valid_from <= $at < valid_to (NULL valid_to: still current).
WITH quota_rows AS (
    SELECT record->>'project' AS project,
           coalesce(record->>'source', '') AS source,
           coalesce(TRY_CAST(record->>'guaranteed_gpus' AS DOUBLE), 0) AS guaranteed
    FROM quotas
    WHERE valid_from <= $at AND (valid_to IS NULL OR valid_to > $at)
),
per_source AS (
    -- the ResourceQuotas of one project's namespaces add up ...
    SELECT project, source, sum(guaranteed) AS guaranteed
    FROM quota_rows GROUP BY project, source
),
guarantees AS (
    -- ... while two sources describing one project (a Kueue queue and the config) are the
    -- same guarantee told twice: the larger counts, never their sum.
    SELECT project, max(guaranteed) AS guaranteed_gpus FROM per_source GROUP BY project
),
pods AS (
    SELECT coalesce(nullif(record->>'project', ''), record->>'namespace') AS project,
           record->>'phase' AS phase,
           nullif(record->>'node', '') AS node,
           coalesce(TRY_CAST(record->>'gpu_request' AS DOUBLE), 0)
             + coalesce(TRY_CAST(record->>'gpu_fraction' AS DOUBLE), 0)
               * coalesce(TRY_CAST(record->>'fraction_devices' AS DOUBLE), 1) AS gpus,
           valid_from
    FROM inventory_pods
    WHERE valid_from <= $at AND (valid_to IS NULL OR valid_to > $at)
),
demand AS (
    -- held: bound to a node and not finished (a Pending pod bound to a node already holds
    -- its GPUs); pending: not yet bound, i.e. waiting for GPUs.
    SELECT project,
           coalesce(sum(gpus) FILTER (WHERE node IS NOT NULL
                                      AND phase IN ('Running', 'Pending')), 0) AS used_gpus,
           coalesce(sum(gpus) FILTER (WHERE node IS NULL AND phase = 'Pending'), 0)
               AS pending_gpus,
           count(*) FILTER (WHERE node IS NULL AND phase = 'Pending') AS pending_pods,
           min(valid_from) FILTER (WHERE node IS NULL AND phase = 'Pending') AS pending_since
    FROM pods WHERE gpus > 0
    GROUP BY project
),
pod_versions AS (
    -- the last version of each pod seen in the window: its fraction and project
    SELECT key,
           TRY_CAST(record->>'gpu_fraction' AS DOUBLE) AS fraction,
           nullif(record->>'project', '') AS project
    FROM inventory_pods
    WHERE valid_from <= $at AND (valid_to IS NULL OR valid_to > $lo)
    QUALIFY row_number() OVER (PARTITION BY key ORDER BY valid_from DESC) = 1
),
held_intervals AS (
    -- who held which GPU in [$lo, $at]; a pod's containers on one GPU count once (its
    -- first container's intervals), an interval still open counts up to $at.
    SELECT namespace, pod, gpu_uuid, project,
           greatest(start_ts, $lo) AS s,
           least(coalesce(end_ts, $at), $at) AS e
    FROM workload_intervals
    WHERE start_ts < $at AND (end_ts IS NULL OR end_ts > $lo)
    QUALIFY container = min(container) OVER (PARTITION BY namespace, pod, gpu_uuid)
),
held AS (
    -- a fractional pod holds its fraction of the GPU, a whole-GPU pod all of it
    SELECT coalesce(nullif(h.project, ''), v.project, h.namespace) AS project,
           sum(greatest(epoch(h.e) - epoch(h.s), 0) * coalesce(v.fraction, 1.0)) / 3600.0
               AS gpu_hours
    FROM held_intervals AS h
    LEFT JOIN pod_versions AS v ON v.key = h.namespace || '/' || h.pod
    GROUP BY 1
),
projects AS (
    SELECT project FROM guarantees
    UNION SELECT project FROM demand
    UNION SELECT project FROM held
)
SELECT p.project,
       coalesce(g.guaranteed_gpus, 0) AS guaranteed_gpus,
       coalesce(d.used_gpus, 0) AS used_gpus,
       coalesce(d.pending_gpus, 0) AS pending_gpus,
       coalesce(d.pending_pods, 0) AS pending_pods,
       d.pending_since,
       coalesce(h.gpu_hours, 0) AS gpu_hours
FROM projects AS p
LEFT JOIN guarantees AS g USING (project)
LEFT JOIN demand AS d USING (project)
LEFT JOIN held AS h USING (project)
WHERE p.project IS NOT NULL
ORDER BY p.project;
