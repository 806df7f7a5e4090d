"""The store's schema as numbered migrations; docs/storage.md explains each table.

A migration is a list of SQL statements. :func:`migrate` runs the pending ones (the store
calls it at start-up) in one transaction and records the version reached in ``meta``; the
store refuses a database whose version is newer than :data:`LATEST_VERSION`. Never edit a
released migration: add the next one.

Times are ``TIMESTAMP`` in UTC. JSON columns hold records of the shapes in docs/design.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import duckdb

from gpuscope.core.errors import UserError

#: The block size of the files the store creates and rewrites (``gpuscope db compact``):
#: 64 KiB, not DuckDB's 256 KiB. The store keeps some twenty tables, most of them small, and
#: every column's last segment of a table (and of each roll-up level) fills a block only
#: partly; with smaller blocks a day of 24 GPUs at 15 s takes 7.3 MB instead of 9.7 MB
#: (bench/store.py, docs/storage.md), with no measurable change in scan speed.
BLOCK_SIZE = 65_536

#: v1: every table the collector writes and the analytics read.
MIGRATION_1_TABLES: tuple[str, ...] = (
    # Key/value facts about the database: schema_version, samples_stored, roll-up watermarks.
    "CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)",
    # One row per series (metric + label set); samples refer to it by a 4-byte id.
    # The labels the analytics join on are columns (NULL: the series has no such label);
    # every other label is in `labels`. `last_raw` is the last value as scraped, which the
    # store needs to turn the next counter sample into an increase (and a cheap "now" value).
    """CREATE TABLE series (
        series_id UINTEGER PRIMARY KEY,
        metric VARCHAR NOT NULL,
        kind VARCHAR NOT NULL,
        node VARCHAR, gpu VARCHAR, uuid VARCHAR, mig_instance VARCHAR,
        device VARCHAR, port VARCHAR,
        namespace VARCHAR, pod VARCHAR, container VARCHAR,
        labels MAP(VARCHAR, VARCHAR) NOT NULL,
        first_seen TIMESTAMP NOT NULL,
        last_seen TIMESTAMP NOT NULL,
        last_raw DOUBLE
    )""",
    # Raw samples, narrow and index-free: a gauge's value, or a counter's increase since
    # the previous sample of its series (never negative; a reset counts the new value).
    # Whole seconds: closed days are rewritten sorted by (series_id, ts), where a timestamp
    # in seconds delta-encodes in a few bits and one in ms or us does not.
    """CREATE TABLE samples (
        series_id UINTEGER NOT NULL,
        ts TIMESTAMP_S NOT NULL,
        value DOUBLE NOT NULL
    )""",
    # Target health: one row per scrape attempt.
    """CREATE TABLE scrapes (
        target VARCHAR NOT NULL,
        ts TIMESTAMP NOT NULL,
        up BOOLEAN NOT NULL,
        duration_s DOUBLE,
        samples UINTEGER NOT NULL,
        error VARCHAR
    )""",
    # Who held which GPU when, from gpuscope_gpu_workload_info presence; end_ts is NULL
    # while open, else the first scrape of the same target that no longer showed it.
    """CREATE TABLE workload_intervals (
        namespace VARCHAR NOT NULL, pod VARCHAR NOT NULL, container VARCHAR NOT NULL,
        node VARCHAR NOT NULL, gpu VARCHAR NOT NULL, gpu_uuid VARCHAR NOT NULL,
        kind VARCHAR, project VARCHAR, interactive BOOLEAN,
        target VARCHAR NOT NULL,
        start_ts TIMESTAMP NOT NULL, last_seen TIMESTAMP NOT NULL, end_ts TIMESTAMP
    )""",
    # Kubernetes inventory as history: one row per version of an object, valid_to NULL
    # for the current one. `key` is the node name, namespace/pod, or project.
    """CREATE TABLE inventory_nodes (
        key VARCHAR NOT NULL, record JSON NOT NULL,
        valid_from TIMESTAMP NOT NULL, valid_to TIMESTAMP
    )""",
    """CREATE TABLE inventory_pods (
        key VARCHAR NOT NULL, record JSON NOT NULL,
        valid_from TIMESTAMP NOT NULL, valid_to TIMESTAMP
    )""",
    """CREATE TABLE quotas (
        key VARCHAR NOT NULL, record JSON NOT NULL,
        valid_from TIMESTAMP NOT NULL, valid_to TIMESTAMP
    )""",
    # Findings (docs/design.md shape): one row per occurrence; resolved_at NULL while open.
    """CREATE TABLE findings (
        id VARCHAR NOT NULL, kind VARCHAR NOT NULL, severity VARCHAR NOT NULL,
        subject JSON NOT NULL, since TIMESTAMP, observed_at TIMESTAMP NOT NULL,
        evidence JSON, recommendation JSON, resolved_at TIMESTAMP
    )""",
    # The audit log of actions, planned (dry run) or carried out; append-only.
    """CREATE TABLE actions (
        id VARCHAR NOT NULL, ts TIMESTAMP NOT NULL, kind VARCHAR NOT NULL,
        finding_id VARCHAR, dry_run BOOLEAN NOT NULL, result VARCHAR, record JSON NOT NULL
    )""",
    # Alert state per alert (fingerprint): pending/firing/resolved and what was notified.
    """CREATE TABLE alert_state (
        alert_id VARCHAR PRIMARY KEY, state VARCHAR NOT NULL, since TIMESTAMP NOT NULL,
        updated_at TIMESTAMP NOT NULL, last_notified_at TIMESTAMP, record JSON NOT NULL
    )""",
)

#: v2: roll-ups of samples (5 minutes, 1 hour) that outlive the raw samples, and the
#: days whose samples have been compacted (rewritten sorted by series and time).
MIGRATION_2_ROLLUPS: tuple[str, ...] = (
    """CREATE TABLE compactions (
        day DATE PRIMARY KEY, done_at TIMESTAMP NOT NULL, rows BIGINT NOT NULL
    )""",
    """CREATE TABLE samples_5m (
        series_id UINTEGER NOT NULL, bucket TIMESTAMP NOT NULL,
        min DOUBLE NOT NULL, max DOUBLE NOT NULL, sum DOUBLE NOT NULL,
        count UINTEGER NOT NULL, last DOUBLE NOT NULL
    )""",
    """CREATE TABLE samples_1h (
        series_id UINTEGER NOT NULL, bucket TIMESTAMP NOT NULL,
        min DOUBLE NOT NULL, max DOUBLE NOT NULL, sum DOUBLE NOT NULL,
        count UINTEGER NOT NULL, last DOUBLE NOT NULL
    )""",
)

#: v3: what idle detection carries between runs (gpuscope/analytics/detectors/idle.py), so a
#: scheduled run reads only the samples since its watermark (``meta.idle_state_until``) instead of
#: the whole window: per GPU (or MIG device) uuid, the last sample at or over the idle
#: threshold and its value, the last sample, and since when samples have come without a
#: gap (``covered_since``: unknown is not idle).
MIGRATION_3_IDLE_STATE: tuple[str, ...] = (
    """CREATE TABLE gpu_activity_state (
        uuid VARCHAR PRIMARY KEY,
        last_busy_ts TIMESTAMP, last_busy_value DOUBLE,
        last_sample_ts TIMESTAMP, covered_since TIMESTAMP,
        signal VARCHAR
    )""",
)

#: v4: what the actions executor carries between runs (gpuscope/actions/executor.py), written
# before it
#: acts so that a crash mid-way is undone on the next run: warnings given (and when the
#: action falls due), actions done (never twice for the same pod), nodes it cordoned (and
#: whether they were cordoned before), the last consolidation (its cool-down). ``dry_run``
#: keeps a dry run's simulated timeline apart from the real one.
MIGRATION_4_ACTION_STATE: tuple[str, ...] = (
    """CREATE TABLE action_state (
        key VARCHAR NOT NULL, dry_run BOOLEAN NOT NULL, kind VARCHAR NOT NULL,
        created_at TIMESTAMP NOT NULL, due_at TIMESTAMP, record JSON NOT NULL,
        PRIMARY KEY (key, dry_run)
    )""",
)

#: v5: what the alerts keep besides ``alert_state`` (gpuscope/alerts/, docs/alerts.md): silences
#: with an expiry (``ends_at``; expiring one early moves it to now), per receiver and
#: notification group the alerts last notified as firing and when (so a restart neither
#: repeats nor forgets a notification), and the delivery log, one row per attempt.
MIGRATION_5_ALERTS: tuple[str, ...] = (
    """CREATE TABLE silences (
        id VARCHAR PRIMARY KEY, matchers JSON NOT NULL,
        starts_at TIMESTAMP NOT NULL, ends_at TIMESTAMP NOT NULL,
        created_by VARCHAR NOT NULL, comment VARCHAR NOT NULL, created_at TIMESTAMP NOT NULL
    )""",
    """CREATE TABLE alert_groups (
        receiver VARCHAR NOT NULL, group_key VARCHAR NOT NULL,
        notified JSON NOT NULL, last_notified_at TIMESTAMP,
        PRIMARY KEY (receiver, group_key)
    )""",
    """CREATE TABLE alert_deliveries (
        ts TIMESTAMP NOT NULL, receiver VARCHAR NOT NULL, receiver_type VARCHAR NOT NULL,
        group_key VARCHAR NOT NULL, status VARCHAR NOT NULL, alerts INTEGER NOT NULL,
        attempt INTEGER NOT NULL, outcome VARCHAR NOT NULL, http_status INTEGER,
        error VARCHAR, duration_s DOUBLE
    )""",
)

#: v6: roll-ups that cost what they carry (docs/storage.md, "Roll-ups"). The rows move to
#: ``rollup_5m_rows``/``rollup_1h_rows``: buckets in whole seconds, the count as a small
#: integer, ``max`` NULL where it equals the mean (``sum / count``), rows in (series_id,
#: bucket) order; ``min`` and ``last`` are not kept (no reader read them; a bucket's peak
#: and mean are what the report, idle detection and the API use). A series whose 5-minute
#: buckets each hold one raw sample (it is scraped every 5 minutes or less often) gets no
#: roll-up rows: its raw samples stand in for them, over the ranges recorded in
#: ``rollup_5m_raw``, and are kept until the 5-minute retention. ``samples_5m`` and
#: ``samples_1h`` become views (``series_id, bucket, max, sum, count``, the v2 values), the
#: one definition every reader (report, idle, API, the hourly roll-up) reads.
MIGRATION_6_PACKED_ROLLUPS: tuple[str, ...] = (
    """CREATE TABLE rollup_5m_rows (
        series_id UINTEGER NOT NULL, bucket TIMESTAMP_S NOT NULL,
        sum DOUBLE NOT NULL, count USMALLINT NOT NULL, max DOUBLE
    )""",
    """CREATE TABLE rollup_1h_rows (
        series_id UINTEGER NOT NULL, bucket TIMESTAMP_S NOT NULL,
        sum DOUBLE NOT NULL, count UINTEGER NOT NULL, max DOUBLE
    )""",
    # [lo, hi): the series' raw samples are its 5-minute roll-up (one a bucket)
    """CREATE TABLE rollup_5m_raw (
        series_id UINTEGER NOT NULL, lo TIMESTAMP_S NOT NULL, hi TIMESTAMP_S NOT NULL
    )""",
    """INSERT INTO rollup_5m_rows
    SELECT series_id, bucket, sum, count, nullif(max, sum / count)
    FROM samples_5m ORDER BY series_id, CASE WHEN series_id % 2 = 0 THEN bucket END, bucket DESC""",
    """INSERT INTO rollup_1h_rows
    SELECT series_id, bucket, sum, count, nullif(max, sum / count)
    FROM samples_1h ORDER BY series_id, CASE WHEN series_id % 2 = 0 THEN bucket END, bucket DESC""",
    "DROP TABLE samples_5m",
    "DROP TABLE samples_1h",
    """CREATE VIEW samples_5m AS
    SELECT series_id, CAST(bucket AS TIMESTAMP) AS bucket,
           coalesce(max, sum / count) AS max, sum, CAST(count AS UINTEGER) AS count
    FROM rollup_5m_rows
    UNION ALL
    SELECT s.series_id, CAST(time_bucket(INTERVAL 5 MINUTE, s.ts) AS TIMESTAMP),
           s.value, s.value, CAST(1 AS UINTEGER)
    FROM samples AS s JOIN rollup_5m_raw AS c
      ON s.series_id = c.series_id AND s.ts >= c.lo AND s.ts < c.hi
    WHERE isfinite(s.value)""",
    """CREATE VIEW samples_1h AS
    SELECT series_id, CAST(bucket AS TIMESTAMP) AS bucket,
           coalesce(max, sum / count) AS max, sum, count
    FROM rollup_1h_rows""",
)

#: PodDisruptionBudgets with the inventory (gpuscope/collector/cluster/pdb_records.py): history like
#: the nodes, pods and quotas, keyed ``namespace/name``, so a plan made from the database
#: honours the budgets a live plan reads.
MIGRATION_7_PDBS: tuple[str, ...] = (
    """CREATE TABLE inventory_pdbs (
        key VARCHAR NOT NULL, record JSON NOT NULL,
        valid_from TIMESTAMP NOT NULL, valid_to TIMESTAMP
    )""",
)

#: v8: the writer's log (collector/storage/writer_log.py): what cycles committed since the
#: last fold into ``series`` and ``meta`` (counters' raw values, sample counts).
MIGRATION_8_WRITER_LOG: tuple[str, ...] = (
    """CREATE TABLE writer_log (
        seq BIGINT NOT NULL, series_id UINTEGER, value DOUBLE NOT NULL, ts TIMESTAMP_S
    )""",
)

#: v9: each idle key's read bound (gpuscope/analytics/detectors/idle_reads.py): the earliest
#: of its last nine sample times, so that an incremental fold reads of the 45 minutes
#: before its range only what each key's earlier gaps need (null: the whole look-back).
MIGRATION_9_IDLE_READ_BOUND: tuple[str, ...] = (
    "ALTER TABLE gpu_activity_state ADD COLUMN lookback_from TIMESTAMP",
)

#: v10: each idle key's learned sample spacing (the median of its last eight gaps), so that a
#: key without new samples keeps it and the fold need not read its look-back again: one
#: key sampled last 30 minutes ago (a workload that ended) made every fold read 30 minutes
#: of every busy series (issue 39). Null in a state saved before it: such a key's
#: look-back is read as before.
MIGRATION_10_IDLE_SPACING: tuple[str, ...] = (
    "ALTER TABLE gpu_activity_state ADD COLUMN spacing DOUBLE",
)

#: Version -> statements that bring a database at version - 1 to it.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: MIGRATION_1_TABLES,
    2: MIGRATION_2_ROLLUPS,
    3: MIGRATION_3_IDLE_STATE,
    4: MIGRATION_4_ACTION_STATE,
    5: MIGRATION_5_ALERTS,
    6: MIGRATION_6_PACKED_ROLLUPS,
    7: MIGRATION_7_PDBS,
    8: MIGRATION_8_WRITER_LOG,
    9: MIGRATION_9_IDLE_READ_BOUND,
    10: MIGRATION_10_IDLE_SPACING,
}
LATEST_VERSION: int = max(MIGRATIONS)

READ_VERSION = "SELECT value FROM meta WHERE key = 'schema_version'"
HAS_TABLES = "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database()"
HAS_META = (
    "SELECT count(*) FROM duckdb_tables() "
    "WHERE database_name = current_database() AND table_name = 'meta'"
)
SET_META = "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)"
#: The meta key of the query source's windows (JSON: mode, step, shards, cursors): written
#: by gpuscope/collector/querying/query_ingest.py, read by the alerts' data view.
QUERY_CURSOR_KEY = "query_cursor"
GET_META = "SELECT value FROM meta WHERE key = ?"


@contextmanager
def begin(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """A transaction: committed if the block ends, rolled back if it raises."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def scalar(con: duckdb.DuckDBPyConnection, sql: str, params: Any = None) -> Any:
    row = con.execute(sql, params).fetchone()
    return None if row is None else row[0]


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    """The schema version of the database on ``con``: 0 for an empty database."""
    if scalar(con, HAS_META):
        return int(scalar(con, READ_VERSION))
    if scalar(con, HAS_TABLES):
        raise UserError("the database has tables but no gpuscope schema; is it another app's?")
    return 0


def migrate(con: duckdb.DuckDBPyConnection, target: int = LATEST_VERSION) -> int:
    """Bring the database on ``con`` up to schema ``target`` in one transaction.

    The version is written once, at the end: no other reader sees the versions between
    (one transaction), and each ``INSERT OR REPLACE`` into ``meta`` cost ~3 ms, half of a
    new file's 60 ms of migrations, paid by every collector start on a new file and
    hundreds of times by the tests (issue 39)."""
    current = schema_version(con)
    if target <= current:
        return current
    with begin(con):
        for version in range(current + 1, target + 1):
            for statement in MIGRATIONS[version]:
                con.execute(statement)
            if version == 1:
                con.execute(SET_META, ["samples_stored", "0"])
        con.execute(SET_META, ["schema_version", str(target)])
    return target
