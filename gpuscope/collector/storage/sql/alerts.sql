-- Named queries of collector/storage/store_alerts.py (the alerts' tables, migration 5, and
-- alert_state from migration 1). Parameters are bound; arrow tables registered by the
-- store are named in the comments.

-- name: delete_alert_states
DELETE FROM alert_state WHERE list_contains($ids, alert_id);

-- name: insert_silence
INSERT INTO silences VALUES ($id, $matchers, $starts_at, $ends_at, $created_by, $comment, $now);

-- name: select_silences
-- Active ones (starts_at <= now < ends_at) unless $all; newest first.
SELECT id, CAST(matchers AS VARCHAR), starts_at, ends_at, created_by, comment, created_at
FROM silences
WHERE $all OR (starts_at <= $now AND ends_at > $now)
ORDER BY created_at DESC, id;

-- name: expire_silence
-- Ends a silence now; one that already ended keeps its end. Returns the rows changed.
UPDATE silences SET ends_at = $now WHERE id = $id AND ends_at > $now
RETURNING id;

-- name: silence_exists
SELECT count(*) FROM silences WHERE id = $id;

-- name: delete_old_silences
DELETE FROM silences WHERE ends_at < $cut;

-- name: select_alert_groups
SELECT receiver, group_key, CAST(notified AS VARCHAR), last_notified_at FROM alert_groups;

-- name: upsert_alert_groups
-- incoming: record (JSON: receiver, group_key, notified (list), last_notified_at)
INSERT INTO alert_groups
SELECT r->>'receiver', r->>'group_key', r->'notified',
       CAST(r->>'last_notified_at' AS TIMESTAMP)
FROM (SELECT CAST(record AS JSON) AS r FROM incoming)
ON CONFLICT (receiver, group_key) DO UPDATE SET
    notified = EXCLUDED.notified, last_notified_at = EXCLUDED.last_notified_at;

-- name: delete_empty_alert_groups
DELETE FROM alert_groups WHERE json_array_length(notified) = 0 AND last_notified_at < $cut;

-- name: insert_deliveries
-- incoming: record (JSON: ts, receiver, receiver_type, group_key, status, alerts, attempt,
-- outcome, http_status, error, duration_s)
INSERT INTO alert_deliveries
SELECT CAST(r->>'ts' AS TIMESTAMP), r->>'receiver', r->>'receiver_type', r->>'group_key',
       r->>'status', CAST(r->>'alerts' AS INTEGER), CAST(r->>'attempt' AS INTEGER),
       r->>'outcome', TRY_CAST(r->>'http_status' AS INTEGER), r->>'error',
       TRY_CAST(r->>'duration_s' AS DOUBLE)
FROM (SELECT CAST(record AS JSON) AS r FROM incoming);

-- name: select_deliveries
SELECT ts, receiver, receiver_type, group_key, status, alerts, attempt, outcome,
       http_status, error, duration_s
FROM alert_deliveries
WHERE $receiver IS NULL OR receiver = $receiver
ORDER BY ts DESC, attempt DESC
LIMIT $limit OFFSET $offset;

-- name: count_deliveries
SELECT count(*) FROM alert_deliveries WHERE $receiver IS NULL OR receiver = $receiver;

-- name: delete_old_deliveries
DELETE FROM alert_deliveries WHERE ts < $cut;
