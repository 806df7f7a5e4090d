-- Named queries of collector/storage/store.py. Each query follows its own name line.
-- Parameters are bound ($name or ?); arrow tables registered by the store are named in
-- the comments. {table} is filled in from a fixed list when the module loads.

-- name: load_series
SELECT series_id, kind = 'counter', last_raw, metric, node, gpu, uuid, mig_instance, device,
       port, namespace, pod, container, labels
FROM series;

-- name: insert_series
-- new_series: series_id, metric, kind, node..container, labels (map)
INSERT INTO series
SELECT series_id, metric, kind, node, gpu, uuid, mig_instance, device, port,
       namespace, pod, container, labels, $ts, $ts, NULL
FROM new_series;

-- name: append_samples
-- batch: series_id, ts, value, raw, stored (one row per series, in series_id order). The
-- store has already turned counters into increases (collector/storage/increases.py says
-- the rule); `stored` is false for a counter's NaN or infinite value, which is not kept.
INSERT INTO samples SELECT series_id, ts, value FROM batch WHERE stored;

-- name: update_series
-- batch as above: `raw` is the series' last raw value after this sample (a counter's
-- non-finite value leaves the one before).
UPDATE series SET last_seen = b.ts, last_raw = b.raw
FROM batch AS b WHERE series.series_id = b.series_id;

-- name: append_writer_log
-- log_rows: seq, series_id, value, ts: a cycle's counters whose raw value changed (value:
-- the raw value) and its sample count (series_id NULL, ts: its first sample's time), until
-- the next fold (collector/storage/writer_log.py).
INSERT INTO writer_log SELECT seq, series_id, value, ts FROM log_rows;

-- name: fold_series
-- fold: series_id, ts, raw: every series touched since the last fold, as the writer holds
-- it (its last sample's time and last raw value).
UPDATE series SET last_seen = f.ts, last_raw = f.raw
FROM fold AS f WHERE series.series_id = f.series_id;

-- name: clear_writer_log
DELETE FROM writer_log;

-- name: recover_log_raw
-- A log left by a writer that did not fold it (killed): each counter's last logged value.
UPDATE series SET last_raw = l.raw
FROM (SELECT series_id, arg_max(value, seq) AS raw FROM writer_log
      WHERE series_id IS NOT NULL GROUP BY series_id) AS l
WHERE series.series_id = l.series_id;

-- name: recover_log_seen
-- ... and each series' last sample time since the log's first cycle.
UPDATE series SET last_seen = x.ts
FROM (SELECT series_id, max(ts) AS ts FROM samples
      WHERE ts >= (SELECT min(ts) FROM writer_log WHERE series_id IS NULL)
      GROUP BY series_id) AS x
WHERE series.series_id = x.series_id AND x.ts > series.last_seen;

-- name: get_samples_stored
SELECT CAST(value AS HUGEINT) FROM meta WHERE key = 'samples_stored';

-- name: writer_log_rows
SELECT count(*) FROM writer_log;

-- name: samples_logged
-- The samples of the cycles in the log (not yet in meta's samples_stored).
SELECT coalesce(CAST(sum(value) AS HUGEINT), 0) FROM writer_log WHERE series_id IS NULL;

-- name: add_samples_stored
UPDATE meta SET value = CAST(CAST(value AS HUGEINT) + $n AS VARCHAR)
WHERE key = 'samples_stored';

-- name: set_meta
-- A key of the meta table, set in a batch's own transaction (a query source's cursor).
INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?);

-- name: probe_write
-- A write that changes nothing but must reach the WAL on commit (store health).
UPDATE meta SET value = value WHERE key = 'samples_stored';

-- name: insert_scrape
-- target, ts, up, duration_s, samples, error
INSERT INTO scrapes VALUES (?, ?, ?, ?, ?, ?);

-- name: load_open_intervals
SELECT target, namespace, pod, container, node, gpu_uuid
FROM workload_intervals WHERE end_ts IS NULL;

-- name: close_intervals
-- gone: record (JSON: namespace, pod, container, node, uuid)
UPDATE workload_intervals AS w SET end_ts = $ts
FROM (SELECT CAST(record AS JSON) AS r FROM gone) AS g
WHERE w.target = $target AND w.end_ts IS NULL
  AND w.namespace = g.r->>'namespace' AND w.pod = g.r->>'pod'
  AND w.container = g.r->>'container' AND w.node = g.r->>'node'
  AND w.gpu_uuid = g.r->>'uuid';

-- name: insert_scrapes
-- One row per target of a cycle, its columns as bound lists of equal length: for a cycle's
-- few dozen rows, about half the time of registering an Arrow table and inserting from it
-- (~0.57 against ~1.1 ms for 32 rows).
INSERT INTO scrapes
SELECT unnest(CAST($target AS VARCHAR[])), unnest(CAST($ts AS TIMESTAMP[])),
       unnest(CAST($up AS BOOLEAN[])), unnest(CAST($duration_s AS DOUBLE[])),
       unnest(CAST($samples AS UINTEGER[])), unnest(CAST($error AS VARCHAR[]));

-- name: touch_intervals_many
-- $target, $ts: lists, the targets whose open intervals are still open and were last
-- touched in an earlier minute (store_sql.INTERVAL_TOUCH_S), each with its scrape time.
UPDATE workload_intervals AS w SET last_seen = t.ts
FROM (SELECT unnest(CAST($target AS VARCHAR[])) AS target,
             unnest(CAST($ts AS TIMESTAMP[])) AS ts) AS t
WHERE w.target = t.target AND w.end_ts IS NULL;

-- name: open_intervals
-- opened: record (JSON: the labels of a gpuscope_gpu_workload_info sample)
INSERT INTO workload_intervals
SELECT coalesce(r->>'namespace', ''), coalesce(r->>'pod', ''), coalesce(r->>'container', ''),
       coalesce(r->>'node', ''), coalesce(r->>'gpu', ''), coalesce(r->>'uuid', ''),
       r->>'workload_kind', r->>'project', TRY_CAST(r->>'interactive' AS BOOLEAN),
       $target, $ts, $ts, NULL
FROM (SELECT CAST(record AS JSON) AS r FROM opened);

-- name: insert_series_at
-- new_series: as insert_series, and ts: the time of the cycle each series came in (a run
-- of cycles written at once, collector/storage/store_bulk.py).
INSERT INTO series
SELECT series_id, metric, kind, node, gpu, uuid, mig_instance, device, port,
       namespace, pod, container, labels, ts, ts, NULL
FROM new_series;

-- name: insert_intervals_run
-- opened: record (JSON: the labels, as open_intervals), target, start_ts, last_seen, end_ts:
-- the intervals a run of cycles opened, as its cycles one by one would have left them.
INSERT INTO workload_intervals
SELECT coalesce(r->>'namespace', ''), coalesce(r->>'pod', ''), coalesce(r->>'container', ''),
       coalesce(r->>'node', ''), coalesce(r->>'gpu', ''), coalesce(r->>'uuid', ''),
       r->>'workload_kind', r->>'project', TRY_CAST(r->>'interactive' AS BOOLEAN),
       target, start_ts, last_seen, end_ts
FROM (SELECT CAST(record AS JSON) AS r, target, start_ts, last_seen, end_ts FROM opened);

-- name: update_intervals_run
-- earlier: target, namespace, pod, container, node, uuid, last_seen, end_ts: what a run of
-- cycles did to intervals open before it (last_seen NULL: not touched; end_ts NULL: open).
UPDATE workload_intervals AS w
SET last_seen = coalesce(e.last_seen, w.last_seen), end_ts = e.end_ts
FROM earlier AS e
WHERE w.target = e.target AND w.end_ts IS NULL
  AND w.namespace = e.namespace AND w.pod = e.pod AND w.container = e.container
  AND w.node = e.node AND w.gpu_uuid = e.uuid;

-- name: rollup_5m_coarse
-- The series whose every 5-minute bucket in [$lo, $hi) holds one (finite) raw sample: their
-- raw samples stand in for their roll-up (docs/storage.md, "Roll-ups").
CREATE OR REPLACE TEMP TABLE rollup_coarse AS
SELECT series_id FROM (
    SELECT series_id, time_bucket(INTERVAL 5 MINUTE, ts) AS bucket, count(*) AS n
    FROM samples WHERE ts >= $lo AND ts < $hi AND isfinite(value)
    GROUP BY ALL)
GROUP BY series_id HAVING max(n) = 1;

-- name: rollup_5m_coarse_count
SELECT count(*) FROM rollup_coarse;

-- name: rollup_5m
-- max NULL where it equals the mean (the view samples_5m coalesces it back);
-- rows in series-id order (time forwards, backwards for odd series), so that each column
-- compresses per series; compact_copy orders raw days by metric first, roll-ups not yet.
INSERT INTO rollup_5m_rows
SELECT series_id, bucket, s, n, nullif(mx, s / n)
FROM (
    SELECT series_id, time_bucket(INTERVAL 5 MINUTE, ts) AS bucket,
           max(value) AS mx, sum(value) AS s, count(*) AS n
    FROM samples WHERE ts >= $lo AND ts < $hi AND isfinite(value)  -- a NaN gauge: no mean of NaN
      AND series_id NOT IN (SELECT series_id FROM rollup_coarse)
    GROUP BY ALL)
ORDER BY series_id, CASE WHEN series_id % 2 = 0 THEN bucket END, bucket DESC;

-- name: rollup_5m_extend
-- A coarse series whose stand-in range ends where this window starts: one range grows.
UPDATE rollup_5m_raw SET hi = $hi
WHERE hi = $lo AND series_id IN (SELECT series_id FROM rollup_coarse);

-- name: rollup_5m_stand_in
INSERT INTO rollup_5m_raw
SELECT series_id, $lo, $hi FROM rollup_coarse
WHERE series_id NOT IN (SELECT series_id FROM rollup_5m_raw WHERE hi = $hi);

-- name: rollup_5m_done
DROP TABLE rollup_coarse;

-- name: rollup_1h
INSERT INTO rollup_1h_rows
SELECT series_id, hour, s, n, nullif(mx, s / n)
FROM (
    SELECT series_id, time_bucket(INTERVAL 1 HOUR, bucket) AS hour,
           max(max) AS mx, sum(sum) AS s, sum(count) AS n
    FROM samples_5m WHERE bucket >= $lo AND bucket < $hi
    GROUP BY ALL)
ORDER BY series_id, CASE WHEN series_id % 2 = 0 THEN hour END, hour DESC;

-- name: delete_samples
-- Past raw retention, except the samples that stand in for the 5-minute roll-up: those go
-- at the 5-minute retention ($cut_5m).
DELETE FROM samples WHERE ts < $cut AND (ts < $cut_5m OR NOT EXISTS (
    SELECT 1 FROM rollup_5m_raw AS c
    WHERE c.series_id = samples.series_id AND samples.ts >= c.lo AND samples.ts < c.hi));

-- name: delete_scrapes
DELETE FROM scrapes WHERE ts < $cut;

-- name: delete_5m
DELETE FROM rollup_5m_rows WHERE bucket < $cut;

-- name: delete_5m_raw
DELETE FROM rollup_5m_raw WHERE hi <= $cut;

-- name: delete_1h
DELETE FROM rollup_1h_rows WHERE bucket < $cut;

-- name: first_uncompacted_day
SELECT coalesce(max(day) + 1, (SELECT CAST(min(ts) AS DATE) FROM samples)) FROM compactions;

-- name: max_rowid
-- The last row of the span as it is: the sorted copy comes after it. Bounded by the span so
-- that DuckDB's zone maps skip every other row group (a segment is compacted twelve times
-- a day; the whole table's max(rowid) walks all of it).
SELECT coalesce(max(rowid), -1) FROM samples WHERE ts >= $lo AND ts < $hi;

-- name: compact_copy
-- Append a day's rows again, sorted by metric, then series, then time: per-series runs
-- compress (constant gauges to nothing, timestamps to their deltas) where scrape order does
-- not, and a row group holds series of one metric, whose values compress alike (ALP for a
-- ratio), where series ids in order of first appearance mix a node's metrics and left
-- most of the values to RLE (docs/storage.md). Every other series in that order runs
-- backwards in time, so that where one series' run ends and the next begins the
-- timestamp steps by one interval instead of jumping back a day: a jump costs its whole
-- group of 2,048 timestamps 17 bits each.
INSERT INTO samples
SELECT s.series_id, s.ts, s.value
FROM samples AS s
JOIN (SELECT series_id, row_number() OVER (ORDER BY metric, series_id) - 1 AS k FROM series)
    AS r USING (series_id)
WHERE s.ts >= $lo AND s.ts < $hi
ORDER BY r.k, CASE WHEN r.k % 2 = 0 THEN s.ts END, s.ts DESC;

-- name: compact_delete
-- The day's rows as they were; the sorted copy, local to this transaction, has higher rowids.
DELETE FROM samples WHERE ts >= $lo AND ts < $hi AND rowid <= $max_rowid;

-- name: compact_done
INSERT INTO compactions VALUES ($day, $now, $rows);

-- name: export_day
-- One day of raw samples with their series' labels, for day=YYYY-MM-DD/samples.parquet.
SELECT s.ts, r.metric, r.kind, r.node, r.gpu, r.uuid, r.mig_instance, r.device, r.port,
       r.namespace, r.pod, r.container, r.labels, s.value
FROM samples AS s JOIN series AS r ON r.series_id = s.series_id
WHERE s.ts >= $lo AND s.ts < $hi
ORDER BY s.series_id, s.ts;

-- name: scd_current
-- The current version of every object, its record as the text it was written as.
SELECT key, CAST(record AS VARCHAR) FROM {table} WHERE valid_to IS NULL;

-- name: scd_close
-- closing: key. Close the current version of every object that is gone or changed.
UPDATE {table} SET valid_to = $now
WHERE valid_to IS NULL AND key IN (SELECT key FROM closing);

-- name: scd_open
-- opening: key, record (canonical JSON text). A version for every new or changed object.
INSERT INTO {table}
SELECT key, record, $now, NULL FROM opening;

-- name: update_findings
-- incoming: record (JSON, the docs/design.md finding shape, times as naive UTC ISO text)
UPDATE findings AS f
SET severity = n.r->>'severity', subject = n.r->'subject',
    since = coalesce(CAST(n.r->>'since' AS TIMESTAMP), f.since),
    observed_at = coalesce(CAST(n.r->>'observed_at' AS TIMESTAMP), $now),
    evidence = n.r->'evidence', recommendation = n.r->'recommendation'
FROM (SELECT CAST(record AS JSON) AS r FROM incoming) AS n
WHERE f.id = n.r->>'id' AND f.resolved_at IS NULL;

-- name: insert_findings
INSERT INTO findings
SELECT r->>'id', r->>'kind', r->>'severity', coalesce(r->'subject', '{}'),
       coalesce(CAST(r->>'since' AS TIMESTAMP), CAST(r->>'observed_at' AS TIMESTAMP), $now),
       coalesce(CAST(r->>'observed_at' AS TIMESTAMP), $now),
       r->'evidence', r->'recommendation', NULL
FROM (SELECT CAST(record AS JSON) AS r FROM incoming) AS n
WHERE NOT EXISTS (
    SELECT 1 FROM findings AS f WHERE f.id = n.r->>'id' AND f.resolved_at IS NULL);

-- name: resolve_findings
UPDATE findings SET resolved_at = $now
WHERE resolved_at IS NULL AND list_contains($kinds, kind)
  AND id NOT IN (SELECT CAST(record AS JSON)->>'id' FROM incoming);

-- name: select_findings
SELECT CAST(json_object('id', id, 'kind', kind, 'severity', severity, 'subject', subject,
                        'evidence', evidence, 'recommendation', recommendation) AS VARCHAR),
       since, observed_at, resolved_at
FROM findings
WHERE resolved_at IS NULL OR NOT ?
ORDER BY observed_at, id;

-- name: insert_actions
-- incoming: record (JSON: id, kind, at, finding_id, dry_run, result, ...)
INSERT INTO actions
SELECT r->>'id', coalesce(CAST(r->>'at' AS TIMESTAMP), $now), r->>'kind', r->>'finding_id',
       coalesce(TRY_CAST(r->>'dry_run' AS BOOLEAN), true), r->>'result', r
FROM (SELECT CAST(record AS JSON) AS r FROM incoming);

-- name: upsert_action_state
-- incoming: record (JSON: key, dry_run, kind, created_at, due_at, ...): the whole row is
-- replaced, except created_at, which stays the first one.
INSERT INTO action_state
SELECT r->>'key', CAST(r->>'dry_run' AS BOOLEAN), r->>'kind',
       coalesce(CAST(r->>'created_at' AS TIMESTAMP), $now), CAST(r->>'due_at' AS TIMESTAMP), r
FROM (SELECT CAST(record AS JSON) AS r FROM incoming)
ON CONFLICT (key, dry_run) DO UPDATE SET
    kind = EXCLUDED.kind, due_at = EXCLUDED.due_at, record = EXCLUDED.record;

-- name: delete_action_state
DELETE FROM action_state WHERE dry_run = $dry_run AND list_contains($keys, key);

-- name: select_action_state
SELECT key, kind, created_at, due_at, CAST(record AS VARCHAR) FROM action_state
WHERE dry_run = $dry_run ORDER BY key;

-- name: count_actions_since
-- Acts on workloads (warnings, cordons and notes left out) of one mode since a time: the
-- rate limit's count.
SELECT count(*) FROM actions
WHERE ts >= $since AND dry_run = $dry_run
  AND kind IN ('delete', 'evict', 'stop-notebook', 'annotate')
  AND result IN ('done', 'would-do');

-- name: upsert_alert_state
-- incoming: record (JSON: alert_id, state, since, last_notified_at, ...). A state that
-- does not change keeps its since unless one is given; last_notified_at is kept if absent.
INSERT INTO alert_state
SELECT r->>'alert_id', r->>'state', coalesce(CAST(r->>'since' AS TIMESTAMP), $now), $now,
       CAST(r->>'last_notified_at' AS TIMESTAMP), r
FROM (SELECT CAST(record AS JSON) AS r FROM incoming)
ON CONFLICT (alert_id) DO UPDATE SET
    since = CASE WHEN EXCLUDED.record->>'since' IS NULL AND alert_state.state = EXCLUDED.state
                 THEN alert_state.since ELSE EXCLUDED.since END,
    state = EXCLUDED.state, updated_at = EXCLUDED.updated_at,
    last_notified_at = coalesce(EXCLUDED.last_notified_at, alert_state.last_notified_at),
    record = EXCLUDED.record;

-- name: select_alert_state
SELECT alert_id, CAST(record AS VARCHAR), updated_at FROM alert_state ORDER BY alert_id;
