"""Plumbing shared by the store's modules: named SQL, time helpers, retention settings.

The store is one class (gpuscope/collector/storage/store.py) with its maintenance
(store_maintenance.py) and
its record writers (store_records.py) as mixins; this module is what they all use.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa  # type: ignore[import-untyped]

from gpuscope.collector.scraping.batch import Batch

Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, Labels]
#: namespace, pod, container, node, gpu uuid
IntervalKey = tuple[str, ...]

#: Labels that get their own column in ``series``; every other label goes in its map.
LABEL_COLUMNS: tuple[str, ...] = ("node", "gpu", "uuid", "mig_instance", "device", "port")
LABEL_COLUMNS += ("namespace", "pod", "container")
INTERVAL_LABELS = ("namespace", "pod", "container", "node", "uuid")
#: An open interval's ``last_seen`` is written once a minute of sample time per target,
#: not every scrape: it then lags the interval's last sighting by under a minute, which
#: its only reader (idle detection's hour-long staleness rule) cannot tell apart, and the
#: writer is spared an UPDATE on most cycles (docs/storage.md).
INTERVAL_TOUCH_S = 60
WORKLOAD_INFO = "gpuscope_gpu_workload_info"
EPOCH = datetime(1970, 1, 1)


#: Sample times the store accepts, Unix ms: 1970 up to the year 2200 (DuckDB's timestamps
#: end in the year 294247; a target's 2^62 ms would fail the whole transaction).
MAX_TS_MS = 7_258_118_400_000


class BadBatch(ValueError):
    """A batch the store refuses before its transaction; ``target`` names whose it is."""

    def __init__(self, target: str, message: str) -> None:
        super().__init__(message)
        self.target = target


def check_time(batch: Batch, *times_ms: int) -> None:
    """Raise :class:`BadBatch` for a sample time outside what the store keeps."""
    for t in times_ms:
        if not 0 <= t <= MAX_TS_MS:
            raise BadBatch(batch.target, f"sample timestamp {t} ms is out of range")


def _load_queries() -> dict[str, str]:
    text = (
        files("gpuscope.collector.storage")
        .joinpath("sql", "queries.sql")
        .read_text(encoding="utf-8")
    )
    parts = re.split(r"^-- name: (\w+)\n", text, flags=re.MULTILINE)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


#: Named queries from gpuscope/collector/storage/sql/queries.sql.
Q = _load_queries()
#: Inventory table -> the key of a record (one current version per key).
INVENTORY = {
    "inventory_nodes": lambda r: str(r["name"]),
    "inventory_pods": lambda r: f"{r['namespace']}/{r['name']}",
    "quotas": lambda r: f"{r.get('source', '')}/{r.get('namespace', '')}/{r['project']}",
    "inventory_pdbs": lambda r: f"{r['namespace']}/{r['name']}",
}
#: Inventory table -> its (current versions, close, open) statements.
SCD_SQL = {t: tuple(Q[q].format(table=t) for q in ("scd_current", "scd_close", "scd_open"))
           for t in INVENTORY}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Retention:
    """How long each resolution is kept; roll-ups wait ``rollup_delay`` for late batches."""

    raw_days: float = 8.0
    rollup_5m_days: float = 90.0
    rollup_1h_days: float = 730.0
    rollup_delay: timedelta = timedelta(minutes=1)
    #: The day being written is compacted in closed segments of this many seconds (a
    #: divisor of a day; 0: only closed days), see MaintenanceMixin.compact_segments.
    compact_segment_s: int = 7200
    #: Samples of the last this many seconds are never compacted (segments, the day's
    #: prefix, the closed day wait until they are older): the scheduled jobs read windows
    #: of up to an hour, and a span rewritten sorted by series has every row group reach
    #: across all of it, so such a read scanned the whole span. 0 (the library's
    #: default) compacts what has closed; the collector sets ``compact_recent_seconds``.
    compact_recent_s: int = 0


def utc(ts: datetime | float | str) -> datetime:
    """A naive UTC datetime from an aware or naive (UTC) datetime, Unix seconds or ISO text."""
    if isinstance(ts, str):
        ts = datetime.fromisoformat(ts)
    if isinstance(ts, datetime):
        return ts.astimezone(UTC).replace(tzinfo=None) if ts.tzinfo else ts
    return EPOCH + timedelta(seconds=ts)


def floor_to(ts: datetime, seconds: int) -> datetime:
    return EPOCH + timedelta(seconds=int((ts - EPOCH).total_seconds()) // seconds * seconds)


def series_kind(name: str, types: Mapping[str, str]) -> str:
    """``counter`` for samples that only grow between resets, else ``gauge``."""
    family = types.get(name)
    for suffix in ("_total", "_bucket", "_count", "_sum"):
        if family is None and name.endswith(suffix):
            family = types.get(name.removesuffix(suffix))
    if family == "counter" or (family is None and name.endswith("_total")):
        return "counter"
    cumulative = name.endswith(("_bucket", "_count", "_sum"))
    return "counter" if family in ("histogram", "summary") and cumulative else "gauge"


#: Each record class's field names, read once (``dataclasses.fields`` is slow per call).
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_LEAVES = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> Any:
    """``value`` with every dataclass in it made a dict, at any depth, and lists, tuples and
    dicts rebuilt around them, as ``dataclasses.asdict`` makes them, but without its deep
    copy of every other value: written as JSON, the two are the same text. asdict's copies
    were most of an inventory listing's cost to record (``record_inventory``, issue 39)."""
    cls = type(value)
    if cls in _LEAVES:
        return value
    names = _FIELD_NAMES.get(cls)
    if names is None and dataclasses.is_dataclass(cls):
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    if names is not None:
        return {name: _plain(getattr(value, name)) for name in names}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def as_dict(row: Any) -> dict[str, Any]:
    """A record as a new dict: a dataclass's fields (nested ones as dicts), or a mapping's
    items (a shallow copy)."""
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        out: dict[str, Any] = _plain(row)
        return out
    return dict(row)


def json_records(rows: Iterable[Any], times: Sequence[str]) -> pa.Table:
    """Mappings or dataclasses as one ``record`` column of canonical JSON, times naive UTC.

    JSON has no NaN or infinity: such a value (a detector's mean over NaN gauges) is stored
    as null, so the record stays valid for DuckDB's JSON functions and the API."""
    texts = []
    for rec in map(as_dict, rows):
        for key in times:
            if rec.get(key) is not None:
                rec[key] = utc(rec[key]).isoformat()
        try:
            text = json.dumps(rec, sort_keys=True, separators=(",", ":"), default=str,
                              allow_nan=False)  # fmt: skip
        except ValueError:  # a NaN or infinity: null, as valid JSON must have it
            text = json.dumps(_finite(rec), sort_keys=True, separators=(",", ":"), default=str)
        texts.append(text)
    return pa.table({"record": pa.array(texts, pa.string())})


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None, at any depth."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def run_with(
    con: duckdb.DuckDBPyConnection, name: str, table: pa.Table, sql: str, params: Any
) -> None:
    """Run ``sql`` with ``table`` registered as ``name`` for it."""
    con.register(name, table)
    try:
        con.execute(sql, params)
    finally:
        con.unregister(name)


def is_duckdb_file(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(12)[8:12] == b"DUCK"


#: A DuckDB file starts with three 4 KiB headers (the main one and two alternating database
#: headers), then its blocks.
_FILE_HEADERS_BYTES = 3 * 4096


def missing_bytes(con: duckdb.DuckDBPyConnection, path: Path) -> int:
    """How many bytes of its blocks the database file at ``path`` (open on ``con``) lacks:
    its checkpointed header counts ``total_blocks`` of ``block_size``, and a file cut short
    (a copy or a disk that filled up) lacks the end of them. Truncated at 75-99 % a file
    still gives its schema version and fails only at the first read of a missing block
    (issue 38), so every open checks this first. 0 for a whole file (a larger one is
    whole: free blocks at the end)."""
    row = con.execute("PRAGMA database_size").fetchone()
    if row is None:
        return 0
    block_size, total_blocks, free_blocks = int(row[2]), int(row[3]), int(row[5])
    expected = _FILE_HEADERS_BYTES + block_size * total_blocks if total_blocks else 0
    size = path.stat().st_size
    missing = max(0, expected - size)
    if missing == 0 or missing > free_blocks * block_size:
        return missing
    # a whole file may lack free blocks at its end while the header still counts them
    # (DuckDB cuts them off at a checkpoint, seen after the store's retention; a SIGKILL
    # leaves them unwritten): short by no more than its free blocks, the file is whole if
    # it holds the highest block its metadata and its tables' data use
    used = _FILE_HEADERS_BYTES + block_size * (_highest_used_block(con) + 1)
    return max(0, used - size)


def _highest_used_block(con: duckdb.DuckDBPyConnection) -> int:
    """The highest block id the metadata or any table's column segments use (-1: none)."""
    tables = con.execute(
        "SELECT schema_name, table_name FROM duckdb_tables() "
        "WHERE database_name = current_database()"
    ).fetchall()
    row = con.execute("SELECT max(block_id) FROM pragma_metadata_info()").fetchone()
    highest = -1 if row is None or row[0] is None else int(row[0])
    for schema_name, table in tables:
        row = con.execute(
            "SELECT max(block_id) FROM pragma_storage_info($name) WHERE block_id >= 0",
            {"name": f'"{schema_name}"."{table}"'},
        ).fetchone()
        if row is not None and row[0] is not None:
            highest = max(highest, int(row[0]))
    return highest


def read_writer_state(con: duckdb.DuckDBPyConnection) -> None:
    """Read, and drop, what the collector reads of the file when it opens it (every series
    and every open interval, streamed): a file damaged there is refused by every command
    as the collector refuses it, not by the collector alone (issue 38)."""
    for name in ("load_series", "load_open_intervals"):
        cur = con.execute(Q[name])
        while cur.fetchmany(10_000):
            pass


class StoreParts:
    """What the store's mixins use of :class:`gpuscope.collector.storage.store.Store` (which defines
    it)."""

    path: Path
    read_only: bool
    retention: Retention
    _maintenance: threading.RLock

    def cursor(self) -> duckdb.DuckDBPyConnection:
        raise NotImplementedError

    def _query(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _transaction(self, **tables: pa.Table) -> AbstractContextManager[duckdb.DuckDBPyConnection]:
        raise NotImplementedError
