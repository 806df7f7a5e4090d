-- The cluster's inventory at an instant (gpuscope/analytics/inventory.py): the node and pod
-- records valid at $at and the GPU indices the agents reported then.

-- name: nodes_at
-- Node records valid at $at (inventory history), for fragmentation at that instant.
SELECT record FROM inventory_nodes
WHERE valid_from <= $at AND (valid_to IS NULL OR valid_to > $at)
ORDER BY key;

-- name: pods_at
SELECT record FROM inventory_pods
WHERE valid_from <= $at AND (valid_to IS NULL OR valid_to > $at)
ORDER BY key;

-- name: gpu_indices_at
-- Which GPU indices each pod held on its node at $at, as the agents reported it: from the
-- workload intervals, and under fleet summaries (docs/scale.md) from the per-GPU rows the
-- engine answers for shared GPUs only (a fraction's GPU is what packing needs; every
-- other pod's GPUs are counted whole).
WITH held AS (
    SELECT namespace || '/' || pod AS key, CAST(gpu AS INTEGER) AS gpu
    FROM workload_intervals
    WHERE start_ts <= $at AND (end_ts IS NULL OR end_ts > $at)
      AND TRY_CAST(gpu AS INTEGER) IS NOT NULL
      -- a fleet summary's workload key holds a GPU count in `gpu`, not an index
      AND NOT {summary_row}
    UNION ALL
    SELECT s.namespace || '/' || s.pod, CAST(s.gpu AS INTEGER)
    FROM samples AS x JOIN series AS s USING (series_id)
    WHERE s.metric = 'gpuscope:shared_gpu_workload_info' AND TRY_CAST(s.gpu AS INTEGER) IS NOT NULL
      AND x.ts > $at - INTERVAL 10 MINUTE AND x.ts <= $at
)
SELECT key, list(DISTINCT gpu) AS gpus FROM held GROUP BY ALL;
