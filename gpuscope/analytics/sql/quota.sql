-- Named queries of analytics/quota.py (and the weekly report's over-quota hours). Each
-- query follows its own name line; parameters are bound: $at (the time analysed), $lo
-- (the start of the fairness window), $start/$end (a report's range). {quota_state} is
-- filled in from the block of that name at load: ONE definition of guarantee, use and
-- demand, evaluated at each instant `t` of an `instants` CTE the query defines first.

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
quota_pods AS (
    SELECT i.t,
           coalesce(nullif(p.record->>'project', ''), p.record->>'namespace') AS project,
           p.record->>'phase' AS phase,
           nullif(p.record->>'node', '') AS node,
           coalesce(TRY_CAST(p.record->>'gpu_request' AS DOUBLE), 0)
             + coalesce(TRY_CAST(p.record->>'gpu_fraction' AS DOUBLE), 0)
               * coalesce(TRY_CAST(p.record->>'fraction_devices' AS DOUBLE), 1) AS gpus,
           p.valid_from
    FROM instants AS i JOIN inventory_pods AS p
      ON p.valid_from <= i.t AND (p.valid_to IS NULL OR p.valid_to > i.t)
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
           coalesce(g.guaranteed_gpus, 0) AS guaranteed_gpus, g.borrowing_limit, g.weight,
           coalesce(d.used_gpus, 0) AS used_gpus,
           coalesce(d.pending_gpus, 0) AS pending_gpus,
           coalesce(d.pending_pods, 0) AS pending_pods,
           coalesce(d.largest_pending_gpus, 0) AS largest_pending_gpus,
           d.pending_since
    FROM guarantees AS g FULL JOIN demand AS d USING (t, project)
    WHERE project IS NOT NULL
)

-- name: quota_projects
-- One row per project as of $at: its quota state and its GPU-hours over [$lo, $at].
WITH instants AS (SELECT CAST($at AS TIMESTAMP) AS t),
{quota_state},
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
)
SELECT project,
       coalesce(s.guaranteed_gpus, 0) AS guaranteed_gpus,
       coalesce(s.used_gpus, 0) AS used_gpus,
       coalesce(s.pending_gpus, 0) AS pending_gpus,
       coalesce(s.pending_pods, 0) AS pending_pods,
       s.pending_since,
       coalesce(h.gpu_hours, 0) AS gpu_hours,
       s.borrowing_limit, s.weight,
       coalesce(s.largest_pending_gpus, 0) AS largest_pending_gpus
FROM quota_state AS s FULL JOIN held AS h USING (project)
WHERE project IS NOT NULL
ORDER BY project;

-- name: borrowed_pods
-- The pods holding GPUs at $at of the projects in $projects (those over their
-- guarantee): reclaim candidates, whole pods grouped by their controller into jobs.
SELECT coalesce(nullif(record->>'project', ''), record->>'namespace') AS project,
       record->>'namespace' AS namespace, record->>'name' AS pod,
       coalesce(record->>'owner_kind', '') AS owner_kind,
       coalesce(record->>'owner_name', '') AS owner_name,
       coalesce(TRY_CAST(record->>'gpu_request' AS DOUBLE), 0)
         + coalesce(TRY_CAST(record->>'gpu_fraction' AS DOUBLE), 0)
           * coalesce(TRY_CAST(record->>'fraction_devices' AS DOUBLE), 1) AS gpus,
       coalesce(TRY_CAST(record->>'priority' AS INTEGER), 0) AS priority,
       coalesce(TRY_CAST(record->>'preemptible' AS BOOLEAN), false) AS preemptible,
       coalesce(TRY_CAST(record->>'protected' AS BOOLEAN), false) AS protected,
       coalesce(TRY_CAST(record->>'start_time' AS DOUBLE), 0) AS start_time,
       -- DRA: standalone claims keep their devices when the pod goes (dra_apply.py)
       coalesce(record->'annotations'->>'gpuscope.io/dra-standalone-claims', '')
         AS standalone_claims
FROM inventory_pods
WHERE valid_from <= $at AND (valid_to IS NULL OR valid_to > $at)
  AND nullif(record->>'node', '') IS NOT NULL
  AND record->>'phase' IN ('Running', 'Pending')
  AND list_contains($projects, coalesce(nullif(record->>'project', ''), record->>'namespace'))
ORDER BY namespace, pod;

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
GROUP BY s.project;
