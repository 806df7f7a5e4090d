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
-- Which GPU indices each pod held on its node at $at, as the agents reported it.
SELECT namespace || '/' || pod AS key, list(DISTINCT CAST(gpu AS INTEGER)) AS gpus
FROM workload_intervals
WHERE start_ts <= $at AND (end_ts IS NULL OR end_ts > $at)
  AND TRY_CAST(gpu AS INTEGER) IS NOT NULL
GROUP BY ALL;
