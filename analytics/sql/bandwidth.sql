-- Named queries of analytics/bandwidth.py. Parameters are bound: $at (the time analysed),
-- $lo (the start of the window, $at - window), $read_lo (a little earlier: the sample
-- before the window, which starts its first sub-interval), $hot (ib_hot_ratio),
-- $hot_share (the share of the window that must be over $hot), $coverage (the share of
-- the window the samples must cover), $idle (a rail under this is idle).
-- Counter samples are increases since the previous sample of their series, so the rate
-- of a sub-interval is value / (ts - previous ts) and the window's is sum / span.

-- name: port_stats
-- One row per IB port seen in the window: throughput as a share of link rate per
-- direction (time-weighted over the window), how much of the window it was over $hot,
-- the transmit-wait rate, whether it is hot, and how the node's other rails fared.
WITH ib AS (
    SELECT series_id, metric, node, device, port
    FROM series
    WHERE metric IN ('gpuscope_ib_transmit_bytes_total', 'gpuscope_ib_receive_bytes_total',
                     'gpuscope_ib_transmit_wait_total', 'gpuscope_ib_port_rate_bytes_per_second')
      AND last_seen > $read_lo AND first_seen <= $at
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
steps AS (
    SELECT series_id, ts, value,
           epoch(ts) - epoch(lag(ts) OVER (PARTITION BY series_id ORDER BY ts)) AS dt
    FROM raw
    WHERE series_id IN (SELECT series_id FROM ib
                        WHERE metric <> 'gpuscope_ib_port_rate_bytes_per_second')
    QUALIFY ts > $lo
),
per_series AS (
    -- sub-intervals ending in the window; the first may start a little before it
    SELECT i.node, i.device, i.port, i.metric,
           sum(s.value) AS increase,
           sum(s.dt) AS span_s,
           least(epoch(max(s.ts)), epoch($at))
             - greatest(min(epoch(s.ts) - s.dt), epoch($lo)) AS covered_s,
           sum(s.dt) FILTER (WHERE l.rate > 0 AND s.value / s.dt >= $hot * l.rate) AS hot_s,
           max(s.value / s.dt) AS peak_rate,
           any_value(l.rate) AS rate
    FROM steps AS s
    JOIN ib AS i USING (series_id)
    LEFT JOIN link AS l USING (node, device, port)
    WHERE s.dt > 0
    GROUP BY ALL
),
directions AS (
    SELECT node, device, port, metric, rate, covered_s, increase / span_s AS bytes_per_s,
           CASE WHEN rate > 0 THEN increase / span_s / rate END AS ratio,
           CASE WHEN rate > 0 THEN peak_rate / rate END AS peak_ratio,
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
    WHERE metric = 'gpuscope_ib_errors_total' AND last_seen > $lo AND first_seen <= $at
)
SELECT e.node, e.device, e.port, coalesce(e.type, '') AS type, sum(s.value) AS increase,
       min(s.ts) FILTER (WHERE s.value > 0) AS first_increase
FROM samples AS s JOIN errs AS e USING (series_id)
WHERE s.ts > $lo AND s.ts <= $at AND s.series_id IN (SELECT series_id FROM errs)
GROUP BY ALL
HAVING sum(s.value) > 0
ORDER BY e.node, e.device, e.port, type;

-- name: node_workloads
-- Workloads holding GPUs on the given nodes at $at, from the open workload intervals.
SELECT node, namespace, pod, any_value(project) AS project, any_value(kind) AS kind,
       list(DISTINCT gpu ORDER BY gpu) AS gpus
FROM workload_intervals
WHERE node IN (SELECT unnest($nodes)) AND start_ts <= $at AND (end_ts IS NULL OR end_ts > $at)
GROUP BY node, namespace, pod
ORDER BY node, namespace, pod;
