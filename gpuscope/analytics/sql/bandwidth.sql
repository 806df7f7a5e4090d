-- Named queries of analytics/detectors/bandwidth.py. Parameters are bound: $at (the time analysed),
-- $lo (the start of the window, $at - window), $read_lo (a little earlier: the sample
-- before the window, which starts its first sub-interval), $seen_lo (the series
-- prefilter: $read_lo, or $lo for port_errors, less LAST_SEEN_LAG_S, as series.last_seen
-- lags a series' newest sample by up to that much: collector/storage/writer_log.py),
-- $hot (ib_hot_ratio), $hot_share (the share of the window that must be over $hot), $coverage (the share of
-- the window the samples must cover), $idle (a rail under this is idle).
-- Counter samples are increases since the previous sample of their series, so the rate
-- of a sub-interval is value / (ts - previous ts) and the window's is sum / span. A step's
-- length is one rule (detectors/sample_steps.py, the step_s fragment): under fleet
-- summaries a hot port's or link's series is of kind 'gauge', one bucket's increase a
-- sample, and its first sample read covers its own bucket ($bucket_s): it counts.

-- name: port_stats
-- One row per IB port seen in the window: throughput as a share of link rate per
-- direction (time-weighted over the window), how much of the window it was over $hot,
-- the transmit-wait rate, whether it is hot, and how the node's other rails fared.
WITH ib AS (
    SELECT series_id, metric, kind, node, device, port
    FROM series
    WHERE metric IN ('gpuscope_ib_transmit_bytes_total', 'gpuscope_ib_receive_bytes_total',
                     'gpuscope_ib_transmit_wait_total', 'gpuscope_ib_port_rate_bytes_per_second')
      AND last_seen > $seen_lo AND first_seen <= $at
),
raw AS (
    -- only the window (+ a little): time-ordered row groups outside it are skipped by
    -- their min/max; two samples in one second are one step (their increases add).
    SELECT series_id, ts, sum(value) AS value, max(value) AS gauge
    FROM samples
    WHERE ts > $read_lo AND ts <= $at AND series_id IN (SELECT series_id FROM ib)
    GROUP BY series_id, ts
),
link AS (
    -- the link rate is a gauge: its last value in the window
    SELECT i.node, i.device, i.port, arg_max(r.gauge, r.ts) AS rate
    FROM raw AS r JOIN ib AS i USING (series_id)
    WHERE i.metric = 'gpuscope_ib_port_rate_bytes_per_second'
    GROUP BY ALL
),
ib_rate AS (
    -- each counter series with its port's rate, once: the steps below join it on the
    -- integer series_id, not each step on (node, device, port) strings (~5 ms of CPU a
    -- run on 8 agents' 64 ports, issue 39)
    SELECT i.series_id, i.node, i.device, i.port, i.metric, i.kind, l.rate
    FROM ib AS i LEFT JOIN link AS l USING (node, device, port)
    WHERE i.metric <> 'gpuscope_ib_port_rate_bytes_per_second'
),
gauge_series AS (
    -- fleet summaries' ports (one bucket's increase a sample): the step rule's exception
    SELECT series_id FROM ib_rate WHERE kind = 'gauge'
),
steps AS (
    -- dt by the one step rule (detectors/sample_steps.py): a summary port's first stored
    -- bucket is a step of its own
    SELECT series_id, ts, value, {step_s} AS dt
    FROM raw
    WHERE series_id IN (SELECT series_id FROM ib_rate)
    QUALIFY ts > $lo
),
chunks AS (
    -- the peak and the time hot are judged over spans of about 10 s: timestamps are
    -- whole seconds, so
    -- one 1-second step's true elapsed time is anywhere in (0, 2) s and its rate can read
    -- far over the line rate; over 10 s the error is under a tenth
    SELECT series_id, sum(value) AS increase, sum(dt) AS span_s
    FROM steps WHERE dt > 0
    GROUP BY series_id, floor((epoch(ts) - epoch($lo)) / 10)
),
peaks AS (
    -- the peak, and the time over $hot, both judged on those spans
    SELECT c.series_id,
           coalesce(max(c.increase / c.span_s) FILTER (WHERE c.span_s >= 10),
                    sum(c.increase) / sum(c.span_s)) AS peak_rate,
           sum(c.span_s) FILTER (WHERE i.rate > 0 AND c.increase / c.span_s >= $hot * i.rate)
               AS hot_s
    FROM chunks AS c JOIN ib_rate AS i USING (series_id)
    GROUP BY c.series_id
),
per_id AS (
    -- sub-intervals ending in the window (the first may start a little before it), summed
    -- per series_id first: grouping every step by its labels cost more (issue 39)
    SELECT series_id, sum(value) AS increase, sum(dt) AS span_s, max(ts) AS last_ts,
           min(epoch(ts) - dt) AS first_s
    FROM steps WHERE dt > 0
    GROUP BY series_id
),
per_series AS (
    -- per port and metric: two series of one (other labels apart) add up, as before
    SELECT i.node, i.device, i.port, i.metric,
           sum(s.increase) AS increase,
           sum(s.span_s) AS span_s,
           least(epoch(max(s.last_ts)), epoch($at))
             - greatest(min(s.first_s), epoch($lo)) AS covered_s,
           any_value(k.hot_s) AS hot_s,
           any_value(k.peak_rate) AS peak_rate,
           any_value(i.rate) AS rate
    FROM per_id AS s
    JOIN ib_rate AS i USING (series_id)
    LEFT JOIN peaks AS k USING (series_id)
    GROUP BY ALL
),
directions AS (
    SELECT node, device, port, metric, rate, covered_s, increase / span_s AS bytes_per_s,
           CASE WHEN rate > 0 THEN increase / span_s / rate END AS ratio,
           -- a link cannot carry more than its rate: what is left of the timestamps'
           -- rounding over 10 s is capped there
           CASE WHEN rate > 0 THEN least(peak_rate / rate, 1.0) END AS peak_ratio,
           coalesce(hot_s, 0) / span_s AS hot_share
    FROM per_series
    WHERE metric IN ('gpuscope_ib_transmit_bytes_total', 'gpuscope_ib_receive_bytes_total')
),
ports AS (
    -- a port is as busy as its busier direction; hot when that direction stayed over
    -- $hot on average AND for most of the window AND the samples cover the window
    SELECT d.node, d.device, d.port, any_value(d.rate) AS link_rate_bytes_per_second,
           max(d.ratio) AS ratio,
           arg_max(CASE d.metric WHEN 'gpuscope_ib_transmit_bytes_total' THEN 'transmit'
                   ELSE 'receive' END, coalesce(d.ratio, 0)) AS direction,
           max(d.bytes_per_s) FILTER (WHERE d.metric = 'gpuscope_ib_transmit_bytes_total')
               AS transmit_bytes_per_second,
           max(d.bytes_per_s) FILTER (WHERE d.metric = 'gpuscope_ib_receive_bytes_total')
               AS receive_bytes_per_second,
           max(d.peak_ratio) AS peak_ratio,
           max(d.hot_share) AS hot_share,
           min(d.covered_s) AS covered_s,
           bool_or(d.ratio >= $hot AND d.hot_share >= $hot_share
                   AND d.covered_s >= $coverage * (epoch($at) - epoch($lo))) AS hot
    FROM directions AS d
    GROUP BY d.node, d.device, d.port
),
waits AS (
    SELECT node, device, port, increase / span_s AS transmit_wait_per_second
    FROM per_series WHERE metric = 'gpuscope_ib_transmit_wait_total'
)
SELECT p.node, p.device, p.port, p.link_rate_bytes_per_second, p.ratio, p.direction,
       p.transmit_bytes_per_second, p.receive_bytes_per_second, p.peak_ratio, p.hot_share,
       p.covered_s, coalesce(p.hot, false) AS hot, w.transmit_wait_per_second,
       count(*) OVER node_ports AS node_ports,
       max(p.ratio) OVER node_ports AS node_max_ratio,
       count(*) FILTER (WHERE coalesce(p.hot, false)) OVER node_ports AS node_hot_ports,
       count(*) FILTER (WHERE p.ratio >= $idle) OVER node_ports AS node_busy_ports
FROM ports AS p
LEFT JOIN waits AS w USING (node, device, port)
WINDOW node_ports AS (PARTITION BY p.node)
ORDER BY p.node, p.device, p.port;

-- name: port_errors
-- Error counters that increased in the window, one row per port and error type.
WITH errs AS (
    SELECT series_id, node, device, port, labels['type'] AS type
    FROM series
    WHERE metric = 'gpuscope_ib_errors_total' AND last_seen > $seen_lo AND first_seen <= $at
),
per_id AS (
    -- summed per series_id, then its labels joined: grouping every sample by the
    -- labels cost more (issue 39)
    SELECT series_id, sum(value) AS increase, min(ts) FILTER (WHERE value > 0) AS first_increase
    FROM samples
    WHERE ts > $lo AND ts <= $at AND series_id IN (SELECT series_id FROM errs)
    GROUP BY series_id
)
SELECT e.node, e.device, e.port, coalesce(e.type, '') AS type, sum(s.increase) AS increase,
       min(s.first_increase) AS first_increase
FROM per_id AS s JOIN errs AS e USING (series_id)
GROUP BY ALL
HAVING sum(s.increase) > 0
ORDER BY e.node, e.device, e.port, type;

-- name: node_workloads
-- Workloads holding GPUs on the given nodes at $at, from the open workload intervals, with
-- the GPU indices they hold (a fleet summary's `gpu` is a GPU count, not an index: its
-- workload is listed, its indices unknown).
SELECT node, namespace, pod, any_value(project) AS project, any_value(kind) AS kind,
       coalesce(list(DISTINCT gpu ORDER BY gpu) FILTER (WHERE NOT {summary_row}),
                CAST([] AS VARCHAR[])) AS gpus
FROM workload_intervals
WHERE node IN (SELECT unnest($nodes)) AND start_ts <= $at AND (end_ts IS NULL OR end_ts > $at)
GROUP BY node, namespace, pod
ORDER BY node, namespace, pod;

-- name: gpu_link_stats
-- One row per GPU link (NVLink, PCIe) seen in the window, the same way as port_stats:
-- throughput of the busier direction as a share of the link's capacity, how much of the
-- window it was over $hot, whether it is hot. The capacity comes from the GPU's model
-- (the link series' own `model` label where it has one, as fleet summaries store it, else
-- gpuscope_gpu_info's `model` label) matched against $cap_metric/$cap_pattern/$cap_bytes
-- (parallel lists from the settings; the longest matching pattern wins). Whole GPUs only:
-- MIG instances have no link counters of their own. A link series of kind 'gauge' is fleet
-- summaries' (each sample one bucket's increase, $bucket_s long, stored only in buckets
-- the link was over the floor): its first sample in the read range has no sample before
-- it and covers its own bucket; later ones cover the time since the sample before (a gap
-- of cool buckets lowers the rate, never raises it).
WITH links AS (
    SELECT series_id, metric, kind, node, gpu, uuid, labels['direction'] AS direction,
           labels['model'] AS own_model, last_seen
    FROM series
    WHERE metric IN ('gpuscope_gpu_nvlink_bytes_total', 'gpuscope_gpu_pcie_bytes_total')
      AND coalesce(mig_instance, '') = ''
      AND last_seen > $seen_lo AND first_seen <= $at
),
info_models AS (
    -- the model each GPU had most recently by $at, for links without one of their own
    SELECT node, gpu, arg_max(labels['model'], last_seen) AS model
    FROM series
    WHERE metric = 'gpuscope_gpu_info' AND coalesce(mig_instance, '') = ''
      AND first_seen <= $at AND node IN (SELECT node FROM links WHERE own_model IS NULL)
    GROUP BY node, gpu
),
models AS (
    -- per GPU and link metric: the link series' own model (the most recent), else the info's
    SELECT l.node, l.gpu, l.metric,
           coalesce(arg_max(l.own_model, l.last_seen) FILTER (WHERE l.own_model IS NOT NULL),
                    any_value(i.model)) AS model
    FROM links AS l LEFT JOIN info_models AS i USING (node, gpu)
    GROUP BY l.node, l.gpu, l.metric
),
caps AS (
    SELECT unnest($cap_metric) AS metric, unnest($cap_pattern) AS pattern,
           unnest($cap_bytes) AS capacity
),
capacity AS (
    SELECT m.node, m.gpu, m.metric, any_value(m.model) AS model,
           arg_max(c.capacity, length(c.pattern)) AS capacity
    FROM models AS m
    JOIN caps AS c ON c.metric = m.metric AND contains(lower(m.model), lower(c.pattern))
    GROUP BY m.node, m.gpu, m.metric
),
raw AS (
    SELECT series_id, ts, sum(value) AS value
    FROM samples
    WHERE ts > $read_lo AND ts <= $at AND series_id IN (SELECT series_id FROM links)
    GROUP BY series_id, ts
),
gauge_series AS (
    SELECT series_id FROM links WHERE kind = 'gauge'
),
steps AS (
    SELECT series_id, ts, value, {step_s} AS dt
    FROM raw
    QUALIFY ts > $lo
),
per_series AS (
    SELECT l.metric, l.node, l.gpu, l.uuid, l.direction,
           sum(s.value) AS increase, sum(s.dt) AS span_s,
           least(epoch(max(s.ts)), epoch($at))
             - greatest(min(epoch(s.ts) - s.dt), epoch($lo)) AS covered_s,
           sum(s.dt) FILTER (WHERE c.capacity > 0 AND s.value / s.dt >= $hot * c.capacity)
               AS hot_s,
           any_value(c.capacity) AS capacity, any_value(c.model) AS model
    FROM steps AS s
    JOIN links AS l USING (series_id)
    LEFT JOIN capacity AS c USING (node, gpu, metric)
    WHERE s.dt > 0
    GROUP BY ALL
),
directions AS (
    SELECT metric, node, gpu, uuid, direction, capacity, model, covered_s,
           increase / span_s AS bytes_per_s,
           CASE WHEN capacity > 0 THEN increase / span_s / capacity END AS ratio,
           coalesce(hot_s, 0) / span_s AS hot_share
    FROM per_series
)
SELECT metric, node, gpu, any_value(uuid) AS uuid, any_value(model) AS model,
       any_value(capacity) AS capacity_bytes_per_second,
       max(ratio) AS ratio,
       arg_max(direction, coalesce(ratio, 0)) AS direction,
       max(bytes_per_s) FILTER (WHERE direction = 'tx') AS tx_bytes_per_second,
       max(bytes_per_s) FILTER (WHERE direction = 'rx') AS rx_bytes_per_second,
       max(hot_share) AS hot_share,
       coalesce(bool_or(ratio >= $hot AND hot_share >= $hot_share
                        AND covered_s >= $coverage * (epoch($at) - epoch($lo))), false) AS hot
FROM directions
GROUP BY metric, node, gpu
ORDER BY metric, node, gpu;

-- name: gpu_workloads
-- Workloads holding the given GPUs ($gpu_keys: 'node/gpu') at $at (a fleet summary's
-- `gpu` is a count, not an index: it names no GPU).
SELECT node, gpu, namespace, pod, any_value(project) AS project, any_value(kind) AS kind
FROM workload_intervals
WHERE node || '/' || gpu IN (SELECT unnest($gpu_keys)) AND NOT {summary_row}
  AND start_ts <= $at AND (end_ts IS NULL OR end_ts > $at)
GROUP BY node, gpu, namespace, pod
ORDER BY node, gpu, namespace, pod;

-- name: job_rails
-- The rails of every multi-node job at $at. A job is the pods of one namespace whose
-- names agree once a trailing '-worker-N', '-master-N' or '-N' is cut ('llm-worker-3',
-- 'llm-master-0' and 'llm-7' are job 'llm'); it is a multi-node job when its pods
-- hold GPUs on two or more nodes. Its rails are the HCAs beside its GPUs: GPU i on a
-- node uses device mlx5_i there (the rail-optimised layout the simulator also uses).
WITH open_pods AS (
    SELECT namespace, pod, node, gpu,
           regexp_replace(pod, '-(worker-|master-)?[0-9]+$', '') AS job
    FROM workload_intervals
    -- a fleet summary's `gpu` is a GPU count, not the index a rail is named by
    WHERE start_ts <= $at AND (end_ts IS NULL OR end_ts > $at) AND NOT {summary_row}
),
spread AS (
    SELECT namespace, job FROM open_pods
    GROUP BY namespace, job
    HAVING count(DISTINCT node) >= 2
)
SELECT o.namespace, o.job, o.node, 'mlx5_' || o.gpu AS device,
       list(DISTINCT o.pod ORDER BY o.pod) AS pods
FROM open_pods AS o JOIN spread USING (namespace, job)
GROUP BY o.namespace, o.job, o.node, device
ORDER BY o.namespace, o.job, o.node, device;

-- name: port_candidates
-- The windows of port_history in which an IB port could be hot, from the 5-minute
-- roll-ups (raw samples past their frontier, $frontier): a bound that never leaves out
-- a hot window, so port_history reads only these ports' raw samples. A window is hot
-- only when a direction's increase over its steps is at least $hot x rate x span, and
-- its span (sum of the steps' lengths) is at least the covered time, at least
-- $coverage x $window. Increases are never negative, so the increases of every bucket
-- that overlaps (e_j - $window, e_j] bound the window's from above (a raw sample past
-- the frontier is a bucket of its own, of no length); the rate is bounded from below by
-- the smallest bucket of its gauge whose values were all equal (max = mean), and by 0
-- (every window a candidate) where a bucket's values differed. A port without a rate
-- is never hot. Rows: the window j and the series port_history must read for the port
-- (both directions and the rate gauge).
WITH link_series AS (
    SELECT series_id AS link_id, node, device, port
    FROM series
    WHERE metric = 'gpuscope_ib_port_rate_bytes_per_second'
      AND last_seen > $seen_lo AND first_seen <= $end
),
ib AS (
    SELECT s.series_id, l.link_id
    FROM series AS s
    JOIN link_series AS l USING (node, device, port)
    WHERE s.metric IN ('gpuscope_ib_transmit_bytes_total', 'gpuscope_ib_receive_bytes_total')
      AND s.last_seen > $seen_lo AND s.first_seen <= $end
),
rate_floor AS (
    SELECT link_id, min(rate) AS rate
    FROM (
        SELECT series_id AS link_id, CASE WHEN max = sum / count THEN max ELSE 0 END AS rate
        FROM samples_5m
        WHERE bucket >= time_bucket(INTERVAL 5 MINUTE, $read_lo) AND bucket <= $end
          AND bucket < $frontier AND series_id IN (SELECT link_id FROM link_series)
        UNION ALL
        SELECT series_id, value
        FROM samples
        WHERE ts > $read_lo AND ts <= $end AND ts >= $frontier
          AND series_id IN (SELECT link_id FROM link_series)
    )
    GROUP BY link_id
),
pieces AS (
    -- (b, b + width): a roll-up bucket, or a raw sample (width 0) past the frontier
    SELECT series_id, epoch(bucket) - $start_s AS b, 300 AS width, sum AS increase
    FROM samples_5m
    WHERE bucket >= time_bucket(INTERVAL 5 MINUTE, $read_lo) AND bucket <= $end
      AND bucket < $frontier AND series_id IN (SELECT series_id FROM ib)
    UNION ALL
    SELECT series_id, epoch(ts) - $start_s, 0, value
    FROM samples
    WHERE ts > $read_lo AND ts <= $end AND ts >= $frontier
      AND series_id IN (SELECT series_id FROM ib)
),
bounds AS (
    -- window j (e_j = j x $step) overlaps the piece when b <= e_j < b + width + $window
    SELECT series_id, j, sum(increase) AS increase
    FROM (
        SELECT series_id, increase,
               unnest(range(greatest(ceil(b / $step)::BIGINT, 1),
                            least(ceil((b + width + $window) / $step)::BIGINT - 1, $n)
                            + 1)) AS j
        FROM pieces
    )
    GROUP BY series_id, j
)
SELECT DISTINCT x.j, i.link_id
FROM bounds AS x
JOIN ib AS i USING (series_id)
JOIN rate_floor AS r USING (link_id)
WHERE x.increase >= $hot * greatest(r.rate, 0) * $coverage * $window * (1 - 1e-9)
ORDER BY x.j, i.link_id;

-- name: port_history
-- Hot IB ports of every window ending at $start + j * $step (j = 1 .. $n), in one pass over
-- ($start - $window - $lookback, $end]: the rule of port_stats for each window, without
-- a run per window. Each sub-interval (a sample and the step since its predecessor) is
-- expanded to the windows (e_j - $window, e_j] that hold its end, so a window longer than
-- the step counts a sub-interval in each window it falls in; a sub-interval whose start is
-- before e_j - $window - $lookback does not count in window j, as in a single run. The
-- link rate of a window is its last sample in (e_j - $window - $lookback, e_j]; a port
-- whose rate never changed in the range (nearly all) takes it from one aggregate instead,
-- for the windows from its first to its last sample. Two samples of one series in the
-- same second are not merged here (a single run merges them): the second's increase
-- counts, its zero-length step adds no time. Joins are on integer ids; labels come last.
WITH link_series AS (
    SELECT series_id AS link_id, node, device, port
    FROM series
    WHERE metric = 'gpuscope_ib_port_rate_bytes_per_second'
      AND last_seen > $seen_lo AND first_seen <= $end
      AND ($all_links OR series_id IN (SELECT unnest($links)))
),
ib AS (
    SELECT s.series_id, s.metric, s.kind, s.node, s.device, s.port, l.link_id
    FROM series AS s
    JOIN link_series AS l USING (node, device, port)
    WHERE s.metric IN ('gpuscope_ib_transmit_bytes_total', 'gpuscope_ib_receive_bytes_total')
      AND s.last_seen > $seen_lo AND s.first_seen <= $end
),
link_samples AS (
    SELECT series_id AS link_id, epoch(ts) - $start_s AS t, value
    FROM samples
    WHERE ts > $read_lo AND ts <= $end AND series_id IN (SELECT link_id FROM link_series)
),
link_const AS (
    -- one rate for the whole range: valid in the windows its samples reach
    SELECT link_id, min(value) AS rate,
           greatest(ceil(min(t) / $step)::BIGINT, 1) AS j_first,
           least(ceil((max(t) + $window + $lookback) / $step)::BIGINT - 1, $n) AS j_last
    FROM link_samples
    GROUP BY link_id
    HAVING min(value) = max(value)
),
link_var AS (
    -- a rate that changed: its last value per window, exactly as a single run takes it
    SELECT link_id, j, arg_max(value, t) AS rate
    FROM (
        SELECT link_id, t, value,
               unnest(range(greatest(ceil(t / $step)::BIGINT, 1),
                            least(ceil((t + $window + $lookback) / $step)::BIGINT - 1, $n)
                            + 1)) AS j
        FROM link_samples
        WHERE link_id NOT IN (SELECT link_id FROM link_const)
    )
    GROUP BY link_id, j
),
gauge_series AS (
    SELECT series_id FROM ib WHERE kind = 'gauge'
),
steps AS (
    -- dt by the one step rule (detectors/sample_steps.py): a summary port's first stored
    -- bucket is a step of its own
    SELECT series_id, epoch(ts) - $start_s AS t, {step_s} AS dt, value
    FROM samples
    WHERE ts > $read_lo AND ts <= $end AND series_id IN (SELECT series_id FROM ib)
),
in_windows AS (
    -- window j holds t when e_j - window < t <= e_j, e_j = j * step (seconds from $start)
    SELECT series_id, t, dt, value,
           unnest(range(greatest(ceil(t / $step)::BIGINT, 1),
                        least(ceil((t + $window) / $step)::BIGINT - 1, $n) + 1)) AS j
    FROM steps
    WHERE dt IS NOT NULL
),
per_series AS (
    SELECT w.series_id, w.j,
           sum(w.value) AS increase, sum(w.dt) AS span_s,
           least(max(w.t), w.j * $step)
             - greatest(min(w.t - w.dt), w.j * $step - $window) AS covered_s,
           sum(w.dt) FILTER (WHERE coalesce(c.rate, v.rate) > 0 AND w.dt > 0
                             AND w.value / w.dt >= $hot * coalesce(c.rate, v.rate)) AS hot_s,
           any_value(coalesce(c.rate, v.rate)) AS rate
    FROM in_windows AS w
    JOIN ib AS i USING (series_id)
    LEFT JOIN link_const AS c ON c.link_id = i.link_id AND w.j BETWEEN c.j_first AND c.j_last
    LEFT JOIN link_var AS v ON v.link_id = i.link_id AND v.j = w.j
    WHERE w.t - w.dt > w.j * $step - $window - $lookback
    GROUP BY w.series_id, w.j
    HAVING sum(w.dt) > 0
),
hot_directions AS (
    SELECT series_id, j, increase / span_s / rate AS ratio
    FROM per_series
    WHERE rate > 0 AND increase / span_s / rate >= $hot
      AND coalesce(hot_s, 0) / span_s >= $hot_share AND covered_s >= $coverage * $window
),
directions AS (
    -- both directions of the ports with a hot one: the port's ratio is the busier's
    SELECT p.series_id, p.j, CASE WHEN p.rate > 0 THEN p.increase / p.span_s / p.rate END
               AS ratio
    FROM per_series AS p
    JOIN (SELECT DISTINCT i.node, i.device, i.port, h.j
          FROM hot_directions AS h JOIN ib AS i USING (series_id)) AS hp
      ON p.j = hp.j
    JOIN ib AS i ON i.series_id = p.series_id AND i.node = hp.node AND i.device = hp.device
                AND i.port = hp.port
)
SELECT d.j, i.node, i.device, i.port, max(d.ratio) AS ratio,
       arg_max(CASE i.metric WHEN 'gpuscope_ib_transmit_bytes_total' THEN 'transmit'
               ELSE 'receive' END, coalesce(d.ratio, 0)) AS direction
FROM directions AS d JOIN ib AS i USING (series_id)
GROUP BY d.j, i.node, i.device, i.port
ORDER BY d.j, i.node, i.device, i.port;
