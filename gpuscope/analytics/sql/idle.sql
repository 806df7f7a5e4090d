-- Named queries of analytics/detectors/idle.py. Each query follows its own name line.
-- Parameters are bound ($name); `prior` is an Arrow table of gpu_activity_state rows that
-- idle.py registers. {busy_series} is filled in from the block of that name at load (in
-- `fold`, from the registered table `busy` the `busy` query gave).

-- name: busy_series
-- The busy signal of each activity key. A GPU (or MIG device) uuid: DCGM SM activity
-- where the GPU has it, NVML utilization otherwise; with $memory, memory-controller
-- utilization too. A fractional pod (its inventory record's gpu_fraction under 1) also
-- gets its own key, `uuid|namespace/pod/container`, from its per-process utilization on
-- that GPU divided by its share: a 0.25-GPU pod at 4.8 % of the whole GPU is at 19 % of
-- what it holds, and is judged on that (its GPU's signal stays its fallback).
fractions AS (
    -- each pod's latest version by $at: an aggregate (a window over the versions cost
    -- ~2.5 ms more a resolution on 8 nodes, issue 39) of the fraction alone, not of the
    -- whole record (the aggregate would copy each newer version's JSON; the idle what-if
    -- resolves these over a week of versions); arg_max_null, as a latest version without
    -- a fraction has none (arg_max would take an older one's)
    SELECT key AS pod_key,
           arg_max_null(TRY_CAST(record->>'gpu_fraction' AS DOUBLE), valid_from) AS share
    FROM inventory_pods WHERE valid_from <= $at GROUP BY key
),
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
    SELECT c.series_id, c.uuid AS key, g.signal, 1.0 AS share
    FROM busy_candidates AS c JOIN gpu_signal AS g USING (uuid)
    WHERE (g.signal = 'sm_active' AND c.metric = 'gpuscope_gpu_sm_active_ratio')
       OR (g.signal = 'utilization' AND c.metric = 'gpuscope_gpu_utilization_ratio')
       OR ($memory AND c.metric = 'gpuscope_gpu_memory_utilization_ratio')
    UNION ALL
    SELECT s.series_id, s.uuid || '|' || s.namespace || '/' || s.pod || '/' || s.container,
           'share_utilization', f.share
    FROM series AS s JOIN fractions AS f ON f.pod_key = s.namespace || '/' || s.pod
    WHERE s.metric = 'gpuscope_gpu_workload_utilization_ratio' AND s.first_seen <= $at
      AND s.uuid IS NOT NULL AND s.uuid <> '' AND f.share > 0 AND f.share < 1
)

-- name: fold
-- The state after the samples in ($lo, $hi]: `prior` folded with them. A sample time is
-- busy when any busy series of its key is at or over $threshold there. The sample spacing
-- is learned from the data: a gap is missing data when it is over three times the larger
-- of $declared_s (the collector's scrape interval) and the median of the key's previous
-- eight gaps, so a 1 s, 15 s, 60 s or 5-minute history is judged at its own pace. A gap
-- with no earlier gap to compare with is judged by the next eight gaps where there are
-- some, else taken as the spacing unless it is longer than a third of the look-back (then
-- it is missing data). The samples of the
-- $lookback before $lo are read for those earlier gaps only, and of those only from each
-- key's `lookback_from` on (its last nine sample times at $lo are all its earlier gaps
-- can need: analytics/detectors/idle_reads.py); $read_from, the earliest of them, lets
-- DuckDB skip the row groups before it. A missing-data gap is judged
-- by the samples on both sides ({bridged}, the rule analytics/detectors/idle_gaps.py shares with the
-- report): idle on both sides, the key was idle through it; otherwise it restarts
-- covered_since, so data missing next to a busy sample is unknown, never idle.
-- `spacing` (seconds) is the median of the last eight gaps at the end. A key without
-- samples in the range keeps the prior's spacing and `lookback_from` (its last nine sample
-- times are the same as when they were learned), so its look-back is read only where the
-- prior lacks them: idle_reads.py leaves such keys out of $read_from (schema v10).
WITH {busy_series},
new_samples AS (
    SELECT b.key AS uuid, s.ts, s.value / b.share AS value
    FROM samples AS s JOIN busy_series AS b USING (series_id)
    LEFT JOIN prior AS p ON p.uuid = b.key
    WHERE s.ts > $lo - $lookback AND s.ts >= $read_from AND s.ts <= $hi
      AND s.ts >= coalesce(p.lookback_from, $lo - $lookback)
),
per_time AS (
    SELECT uuid, ts, max(value) AS value, max(value) >= $threshold AS busy
    FROM new_samples GROUP BY uuid, ts
),
with_gaps AS (
    SELECT t.uuid, t.ts, t.value, t.busy,
           epoch(t.ts) - epoch(CASE WHEN lag(t.ts) OVER w IS NOT NULL THEN lag(t.ts) OVER w
                                    WHEN t.ts > $lo THEN p.last_sample_ts END) AS gap_s,
           CASE WHEN lag(t.ts) OVER w IS NOT NULL THEN lag(t.busy) OVER w
                WHEN t.ts > $lo AND p.last_sample_ts IS NOT NULL
                    THEN coalesce(p.last_busy_ts >= p.last_sample_ts, false) END
               AS before_busy,
           t.busy AS after_busy,
           row_number() OVER w AS rn,
           count(*) OVER (PARTITION BY t.uuid) AS n
    FROM per_time AS t LEFT JOIN prior AS p USING (uuid)
    WINDOW w AS (PARTITION BY t.uuid ORDER BY t.ts)
),
asked AS (
    -- the median of the previous eight gaps is needed only where a gap is longer than the
    -- declared tolerance (most are not), and of the last eight at the end (the spacing);
    -- an equi-join on (uuid, rn - k) keeps it linear in those rows
    SELECT uuid, rn, 'usual' AS what, unnest(range(1, 9)) AS k
    FROM with_gaps WHERE gap_s > 3 * $declared_s AND ts > $lo
    UNION ALL
    -- a long gap with no earlier gap to compare with (the first of a history) is judged
    -- by the next eight gaps where the window has them
    SELECT uuid, rn, 'next', unnest(range(-8, 0)) FROM with_gaps
    WHERE gap_s > 3 * $declared_s AND ts > $lo
    UNION ALL
    SELECT uuid, rn, 'spacing', unnest(range(0, 8)) FROM with_gaps WHERE rn = n
),
medians AS (
    SELECT a.uuid, a.rn, a.what, median(g.gap_s) AS gap_s
    FROM asked AS a JOIN with_gaps AS g ON g.uuid = a.uuid AND g.rn = a.rn - a.k
    GROUP BY a.uuid, a.rn, a.what
),
judged AS (
    SELECT w.*, coalesce(u.gap_s, x.gap_s) AS usual_s, s.gap_s AS spacing_s
    FROM with_gaps AS w
    LEFT JOIN medians AS u ON u.uuid = w.uuid AND u.rn = w.rn AND u.what = 'usual'
    LEFT JOIN medians AS x ON x.uuid = w.uuid AND x.rn = w.rn AND x.what = 'next'
    LEFT JOIN medians AS s ON s.uuid = w.uuid AND s.rn = w.rn AND s.what = 'spacing'
),
folded AS (
    SELECT uuid, min(ts) AS first_ts, max(ts) AS last_sample_ts,
           max(ts) FILTER (WHERE busy) AS last_busy_ts,
           arg_max(value, ts) FILTER (WHERE busy) AS last_busy_value,
           max(ts) FILTER (WHERE gap_s > 3 * greatest($declared_s,
                                        coalesce(usual_s, least(gap_s, $lookback_s / 3)))
                                 AND NOT {bridged})
               AS after_gap,
           max(spacing_s) AS spacing
    FROM judged WHERE ts > $lo GROUP BY uuid
),
context AS (
    -- each key read: the earliest of its last nine sample times (the next fold's read
    -- bound), and its spacing, which a key with samples in the look-back only keeps where
    -- the prior has none (it still tells how fresh the key is)
    SELECT uuid, max(spacing_s) AS spacing, min(ts) FILTER (WHERE rn >= n - 8) AS lookback_from
    FROM judged GROUP BY uuid
),
signals AS (SELECT DISTINCT key AS uuid, signal FROM busy_series)
SELECT uuid,
       coalesce(f.last_busy_ts, p.last_busy_ts) AS last_busy_ts,
       CASE WHEN f.last_busy_ts IS NOT NULL THEN f.last_busy_value
            ELSE p.last_busy_value END AS last_busy_value,
       greatest(f.last_sample_ts, p.last_sample_ts) AS last_sample_ts,
       CASE WHEN f.after_gap IS NOT NULL THEN f.after_gap
            WHEN p.covered_since IS NOT NULL THEN p.covered_since
            ELSE f.first_ts END AS covered_since,
       coalesce(g.signal, p.signal) AS signal,
       coalesce(f.spacing, p.spacing, c.spacing) AS spacing,
       CASE WHEN f.uuid IS NULL AND p.lookback_from IS NOT NULL THEN p.lookback_from
            ELSE c.lookback_from END AS lookback_from
FROM folded AS f FULL JOIN prior AS p USING (uuid)
LEFT JOIN context AS c USING (uuid) LEFT JOIN signals AS g USING (uuid);

-- name: load_state
SELECT uuid, last_busy_ts, last_busy_value, last_sample_ts, covered_since, signal,
       spacing, lookback_from
FROM gpu_activity_state;

-- name: busy
-- The busy series at $at, resolved once a run: the run's two folds and its bridged gaps
-- read them from `busy` (the Arrow table of this answer, which idle.py registers), and
-- idle.py looks among their keys for one the saved state does not hold. Each fold
-- resolving them itself, and a query of its own for that look, were ~30 ms of a run at 8
-- nodes (issue 39); the bridged gaps' own resolution ~10 ms more.
-- With each series' `last_seen`: which keys can have samples after a fold's start
-- (idle_reads.py's read bound).
WITH {busy_series}
SELECT b.series_id, b.key, b.signal, b.share, s.last_seen
FROM busy_series AS b JOIN series AS s USING (series_id);

-- name: rollup_prior
-- The state before $lo from the 5-minute roll-ups (buckets in [$since, $lo)), for a full
-- re-analysis: a busy bucket counts as busy up to its end (idle since is never earlier
-- than the truth), data as continuous from the first bucket (a gap shorter than a bucket
-- cannot be seen in roll-ups), and the last sample as the last bucket's end.
-- A week of buckets is a million rows for the demo's 256 GPUs and their fractional pods:
-- they carry a key's number (`kid`), not its name, and the name and signal (one per key)
-- are joined back to each key's row at the end. With the name on every bucket the query
-- took 124 MB at its peak against 77 MB (the demo's, on top of the process: issue 39);
-- tests/integration/test_idle_rollup_prior.py holds the answers equal to that query's.
WITH {busy_series},
keys AS (
    SELECT key, any_value(signal) AS signal, row_number() OVER (ORDER BY key) AS kid
    FROM busy_series GROUP BY key
),
key_series AS (
    SELECT b.series_id, k.kid, b.share FROM busy_series AS b JOIN keys AS k USING (key)
),
buckets AS (
    SELECT s.kid, r.bucket, max(r.max / s.share) AS max
    FROM samples_5m AS r JOIN key_series AS s USING (series_id)
    WHERE r.bucket >= $since AND r.bucket < $lo
    GROUP BY ALL
),
gaps AS (
    SELECT *, epoch(bucket) - epoch(lag(bucket) OVER w) AS gap_s,
           lag(max) OVER w >= $threshold AS before_busy, max >= $threshold AS after_busy
    FROM buckets WINDOW w AS (PARTITION BY kid ORDER BY bucket)
),
gappy AS (
    -- a gap restarts coverage only when over 3 x greatest(..., 300, ...) below, so over 900 s:
    -- the learned spacing is windowed for the keys with such a gap alone (the rolling
    -- medians over a week of every key's buckets were the demo's memory peak, issue 39)
    SELECT DISTINCT kid FROM gaps WHERE gap_s > 900
),
learned AS (
    -- the same learned-spacing rule as the fold, on bucket starts
    SELECT kid, bucket,
           coalesce(median(gap_s) OVER (PARTITION BY kid ORDER BY bucket
                                        ROWS BETWEEN 8 PRECEDING AND 1 PRECEDING),
                    median(gap_s) OVER (PARTITION BY kid ORDER BY bucket
                                        ROWS BETWEEN 1 FOLLOWING AND 8 FOLLOWING))
               AS usual_s
    FROM gaps SEMI JOIN gappy USING (kid)
),
judged AS (SELECT g.*, l.usual_s FROM gaps AS g LEFT JOIN learned AS l USING (kid, bucket)),
folded AS (
    SELECT kid,
           max(bucket + INTERVAL 5 MINUTE) FILTER (WHERE max >= $threshold) AS last_busy_ts,
           arg_max(max, bucket) FILTER (WHERE max >= $threshold) AS last_busy_value,
           least(max(bucket) + INTERVAL 5 MINUTE, $lo) AS last_sample_ts,
           coalesce(max(bucket) FILTER (WHERE gap_s > 3 * greatest($declared_s, 300,
                                        coalesce(usual_s, least(gap_s, $lookback_s / 3)))
                                        AND NOT {bridged}),
                    min(bucket)) AS covered_since
    FROM judged GROUP BY kid
)
SELECT k.key AS uuid, f.last_busy_ts, f.last_busy_value, f.last_sample_ts, f.covered_since,
       k.signal, NULL::DOUBLE AS spacing
FROM folded AS f JOIN keys AS k USING (kid);

-- name: workloads
-- `state`: the activity state at $at (one row per key). Per workload (namespace, pod,
-- container) holding GPUs at $at: its start (the pod's start time in the inventory, else
-- its first sample), the GPUs it holds (a fractional pod its share), idle since (after
-- its last busy sample, bounded below by its start on each GPU and by the start of
-- gap-free data), and a status: starting (within the start-up grace), active, unknown (a
-- GPU without data through the window, or none fresh: the last sample older than three
-- learned spacings), idle. A fractional pod is judged on its own key (its utilization
-- over its share) where the agents report it, else on its GPU's. Protected workloads
-- (namespace list, or the pod's inventory record says protected / gpuscope.io/protect=true)
-- are left out.
WITH held AS (
    SELECT namespace, pod, container, gpu_uuid,
           any_value(node) AS node, any_value(kind) AS kind, any_value(project) AS project,
           bool_or(coalesce(interactive, false) OR kind = 'interactive') AS interactive,
           min(start_ts) AS start_ts,
           -- a fleet summary's workload key (docs/scale.md, "Fleet summaries") stands for
           -- all the GPUs it holds (collector/storage/held_gpus.py)
           max({held_gpus}) AS held_gpus
    FROM workload_intervals
    WHERE start_ts <= $at AND (end_ts IS NULL OR end_ts > $at) AND last_seen >= $stale
      AND NOT list_contains($protected, namespace)
    GROUP BY namespace, pod, container, gpu_uuid
),
pod_records AS (
    SELECT key,
           TRY_CAST(record->>'gpu_fraction' AS DOUBLE) AS fraction,
           TIMESTAMP '1970-01-01' + to_seconds(TRY_CAST(record->>'start_time' AS DOUBLE))
               AS pod_start,
           -- who owns it, for alert routing: the labels (the settings name the keys), else
           -- the controller (gpuscope/analytics/detectors/idle.py picks)
           CAST(record->'labels' AS VARCHAR) AS pod_labels,
           record->>'owner_kind' AS owner_kind, record->>'owner_name' AS owner_name
    -- only the pods that hold GPUs at $at: no other pod's versions are read (their JSON
    -- was the policies' idle run's memory peak in the demo, issue 39)
    FROM inventory_pods
    WHERE valid_from <= $at AND key IN (SELECT namespace || '/' || pod FROM held)
    QUALIFY row_number() OVER (PARTITION BY key ORDER BY valid_from DESC) = 1
),
protected_pods AS (
    SELECT DISTINCT key FROM inventory_pods
    WHERE valid_from <= $at AND (valid_to IS NULL OR valid_to > $at)
      AND (coalesce(TRY_CAST((record->>'protected') AS BOOLEAN), false)
           OR coalesce((record->'labels'->>'gpuscope.io/protect') = 'true', false))
),
keyed AS (
    SELECT h.*, r.pod_labels, r.owner_kind, r.owner_name,
           CASE WHEN r.fraction > 0 AND r.fraction < 1 THEN r.fraction ELSE 1.0 END AS share,
           least(h.start_ts, coalesce(r.pod_start, h.start_ts)) AS pod_start,
           coalesce(w.uuid, h.gpu_uuid) AS skey
    FROM held AS h
    LEFT JOIN pod_records AS r ON r.key = h.namespace || '/' || h.pod
    LEFT JOIN state AS w
      ON w.uuid = h.gpu_uuid || '|' || h.namespace || '/' || h.pod || '/' || h.container
    WHERE h.namespace || '/' || h.pod NOT IN (SELECT key FROM protected_pods)
),
per_gpu AS (
    SELECT k.*, s.last_busy_value, s.signal,
           s.last_busy_ts >= k.start_ts AND s.last_busy_ts > $window_start AS busy_recent,
           coalesce(s.last_sample_ts >= $at - to_seconds(
                        3 * greatest($declared_s, coalesce(s.spacing, $declared_s)))
                    AND s.covered_since <= $window_start, false) AS data_ok,
           greatest(k.start_ts, s.covered_since, s.last_busy_ts) AS gpu_idle_since,
           CASE WHEN s.last_busy_ts >= k.start_ts THEN s.last_busy_ts END AS busy_ts
    FROM keyed AS k LEFT JOIN state AS s ON s.uuid = k.skey
),
per_workload AS (
    SELECT namespace, pod, container,
           -- the distinct nodes and signals, sorted, as a list each (NULL where none):
           -- string_agg(DISTINCT ... ORDER BY ...) is planned as aggregates of their own
           -- joined back, ~3 ms of CPU a run on 8 agents (issue 39)
           CASE WHEN count(node) > 0
                THEN array_to_string(list_sort(list_distinct(list(node))), ',') END AS node,
           any_value(kind) AS kind, bool_or(interactive) AS interactive,
           any_value(project) AS project, any_value(pod_labels) AS pod_labels,
           any_value(owner_kind) AS owner_kind, any_value(owner_name) AS owner_name,
           min(pod_start) AS start_ts, sum(share * held_gpus) AS gpus,
           list(gpu_uuid ORDER BY gpu_uuid) AS gpu_uuids,
           coalesce(bool_or(busy_recent), false) AS busy_recent,
           bool_and(data_ok) AS data_ok,
           max(gpu_idle_since) AS idle_since,
           arg_max(last_busy_value, busy_ts) AS last_busy_value,
           CASE WHEN count(signal) > 0
                THEN array_to_string(list_sort(list_distinct(list(signal))), ',') END AS signal
    FROM per_gpu GROUP BY namespace, pod, container
)
SELECT namespace, pod, container, node, kind, interactive, start_ts, gpus, gpu_uuids,
       idle_since, last_busy_value, signal, project, pod_labels, owner_kind, owner_name,
       CASE WHEN start_ts > $grace_start THEN 'starting'
            WHEN busy_recent THEN 'active'
            WHEN NOT data_ok THEN 'unknown'
            WHEN idle_since <= $window_start THEN 'idle'
            ELSE 'active' END AS status
FROM per_workload
ORDER BY namespace, pod, container;

-- name: bridged_gaps
-- For each idle workload asked ($wid, with $keys: its GPUs' uuids and its own fractional
-- keys, and $since: its idle-since), the longest gap in data it was judged idle through:
-- the longest gap over three sample spacings (the key's median gap, at least $declared_s)
-- between consecutive samples of one of its keys in [since, $at]; NULL when there was
-- none. One query for every workload of a run, not one each (~20 ms apiece on 8 nodes, a
-- second a run with fifty idle notebooks); $lo, the earliest since, lets DuckDB skip the
-- row groups before it. A key two workloads share (a GPU's uuid) is judged per workload,
-- from its own since.
WITH {busy_series},
asked AS (
    SELECT unnest($wid) AS wid, unnest($keys) AS keys, unnest($since) AS since
),
wanted AS (
    SELECT wid, unnest(keys) AS key, since FROM asked
),
points AS (
    SELECT w.wid, b.key, s.ts
    FROM samples AS s
    JOIN busy_series AS b USING (series_id)
    JOIN wanted AS w ON w.key = b.key AND s.ts >= w.since
    WHERE s.ts >= $lo AND s.ts <= $at
    GROUP BY ALL
),
gaps AS (
    SELECT wid, key,
           epoch(ts) - epoch(lag(ts) OVER (PARTITION BY wid, key ORDER BY ts)) AS gap_s
    FROM points
),
spaced AS (
    SELECT wid, gap_s, greatest($declared_s, median(gap_s) OVER (PARTITION BY wid, key)) AS spacing_s
    FROM gaps
)
SELECT a.wid, max(s.gap_s) FILTER (WHERE s.gap_s > 3 * s.spacing_s) AS longest
FROM asked AS a LEFT JOIN spaced AS s USING (wid)
GROUP BY a.wid
