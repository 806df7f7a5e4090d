"""The collector's DuckDB store: one writer, batched Arrow appends, roll-ups, Parquet export.

docs/storage.md describes the schema and why it is shaped so. One process (the collector)
writes through one :class:`Store`; readers in other threads use :meth:`Store.cursor`, other
processes open the file with ``read_only=True`` while no writer holds it. Every write is one
transaction, so a batch is stored whole or not at all, crash included. Times are injected
(``ts_ms``/``now``) and stored as UTC ``TIMESTAMP``. SQL text is in collector/schema.py and
collector/sql/queries.sql and takes bound parameters only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from importlib.resources import files
from pathlib import Path
from typing import Any, Protocol

import duckdb
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from collector import schema
from gpuscope.errors import UserError

Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, Labels]
#: namespace, pod, container, node, gpu uuid
IntervalKey = tuple[str, ...]

#: Labels that get their own column in ``series``; every other label goes in its map.
LABEL_COLUMNS = tuple("node gpu uuid mig_instance device port namespace pod container".split())
INTERVAL_LABELS = ("namespace", "pod", "container", "node", "uuid")
WORKLOAD_INFO = "gpuscope_gpu_workload_info"
_EPOCH = datetime(1970, 1, 1)


def _load_queries() -> dict[str, str]:
    text = files("collector").joinpath("sql", "queries.sql").read_text(encoding="utf-8")
    parts = re.split(r"^-- name: (\w+)\n", text, flags=re.MULTILINE)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


#: Named queries from collector/sql/queries.sql.
Q = _load_queries()
#: Inventory table -> (the current-version key of a record, its SCD statements).
INVENTORY = {
    "inventory_nodes": lambda r: str(r["name"]),
    "inventory_pods": lambda r: f"{r['namespace']}/{r['name']}",
    "quotas": lambda r: f"{r.get('source', '')}/{r.get('namespace', '')}/{r['project']}",
}
SCD_SQL = {t: (Q["scd_close"].format(table=t), Q["scd_open"].format(table=t)) for t in INVENTORY}


class ScrapeBatch(Protocol):
    """One target's samples at one time, columnar (what :class:`collector.batch.Batch` is).

    ``labels[i]`` is sorted by label name; ``types`` maps a family (a counter's name without
    ``_total``) to its type; ``timestamps_ms[i]``, where not None, overrides ``ts_ms``.
    """

    @property
    def target(self) -> str: ...
    @property
    def ts_ms(self) -> int: ...
    @property
    def names(self) -> Sequence[str]: ...
    @property
    def labels(self) -> Sequence[Labels]: ...
    @property
    def values(self) -> Sequence[float]: ...
    @property
    def types(self) -> Mapping[str, str]: ...
    @property
    def timestamps_ms(self) -> Sequence[int | None] | None: ...


@dataclass(frozen=True, slots=True)
class Retention:
    """How long each resolution is kept; roll-ups wait ``rollup_delay`` for late batches."""

    raw_days: float = 8.0
    rollup_5m_days: float = 90.0
    rollup_1h_days: float = 730.0
    rollup_delay: timedelta = timedelta(minutes=1)


def utc(ts: datetime | float | str) -> datetime:
    """A naive UTC datetime from an aware or naive (UTC) datetime, Unix seconds or ISO text."""
    if isinstance(ts, str):
        ts = datetime.fromisoformat(ts)
    if isinstance(ts, datetime):
        return ts.astimezone(UTC).replace(tzinfo=None) if ts.tzinfo else ts
    return _EPOCH + timedelta(seconds=ts)


def _floor(ts: datetime, seconds: int) -> datetime:
    return _EPOCH + timedelta(seconds=int((ts - _EPOCH).total_seconds()) // seconds * seconds)


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


def _as_dict(row: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        return dataclasses.asdict(row)
    return dict(row)


def _json_records(rows: Iterable[Any], times: Sequence[str]) -> pa.Table:
    """Mappings or dataclasses as one ``record`` column of canonical JSON, times naive UTC."""
    texts = []
    for rec in map(_as_dict, rows):
        for key in times:
            if rec.get(key) is not None:
                rec[key] = utc(rec[key]).isoformat()
        texts.append(json.dumps(rec, sort_keys=True, separators=(",", ":"), default=str))
    return pa.table({"record": pa.array(texts, pa.string())})


def _run_with(
    con: duckdb.DuckDBPyConnection, name: str, table: pa.Table, sql: str, params: Any
) -> None:
    """Run ``sql`` with ``table`` registered as ``name`` for it."""
    con.register(name, table)
    try:
        con.execute(sql, params)
    finally:
        con.unregister(name)


def _is_duckdb_file(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(12)[8:12] == b"DUCK"


def _scalar(con: duckdb.DuckDBPyConnection, sql: str, params: Any = None) -> Any:
    row = con.execute(sql, params).fetchone()
    return None if row is None else row[0]


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    """The schema version of the database on ``con``: 0 for an empty database."""
    if _scalar(con, schema.HAS_META):
        return int(_scalar(con, schema.READ_VERSION))
    if _scalar(con, schema.HAS_TABLES):
        raise UserError("the database has tables but no gpuscope schema; is it another app's?")
    return 0


def migrate(con: duckdb.DuckDBPyConnection, target: int = schema.LATEST_VERSION) -> int:
    """Bring the database on ``con`` up to schema ``target`` in one transaction."""
    current = schema_version(con)
    con.execute("BEGIN TRANSACTION")
    try:
        for version in range(current + 1, target + 1):
            for statement in schema.MIGRATIONS[version]:
                con.execute(statement)
            if version == 1:
                con.execute(schema.SET_META, ["samples_stored", "0"])
            con.execute(schema.SET_META, ["schema_version", str(version)])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return max(current, target)


class Store:
    """The collector's database. Open with :meth:`open`; close it (or use ``with``)."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection, path: Path, read_only: bool, retention: Retention
    ) -> None:
        self.path, self.read_only, self.retention = path, read_only, retention
        self._con = con
        self._lock = threading.RLock()
        self._ids: dict[SeriesKey, int] = {}
        self._next_id = 0
        self._open: dict[str, set[IntervalKey]] = {}
        if not read_only:
            for sid, metric, *cols, extra in con.execute(Q["load_series"]).fetchall():
                pairs = [(k, v) for k, v in zip(LABEL_COLUMNS, cols, strict=True) if v is not None]
                self._ids[(metric, tuple(sorted(pairs + list(extra.items()))))] = sid
                self._next_id = max(self._next_id, sid + 1)
            for target, *key in con.execute(Q["load_open_intervals"]).fetchall():
                self._open.setdefault(target, set()).add(tuple(key))

    @classmethod
    def open(
        cls, path: str | Path, *, read_only: bool = False, retention: Retention | None = None
    ) -> Store:
        """Open (creating it if absent, unless read-only) and migrate the database at ``path``.

        Raises :class:`UserError` with one line for a file that is not a DuckDB database
        (left untouched), a database of a newer gpuscope, or a read-only open of a missing
        or not yet upgraded database.
        """
        path = Path(path)
        if path.exists() and (path.is_dir() or not _is_duckdb_file(path)):
            raise UserError(f"{path} is not a DuckDB database; refusing to open or overwrite it")
        if read_only and not path.exists():
            raise UserError(f"database {path} does not exist")
        try:
            con = duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as exc:
            raise UserError(f"cannot open database {path}: {str(exc).splitlines()[0]}") from None
        try:
            version = schema_version(con)
            if version > schema.LATEST_VERSION:
                raise UserError(
                    f"database {path} has schema version {version}, newer than this gpuscope "
                    f"supports ({schema.LATEST_VERSION}); upgrade gpuscope to open it"
                )
            if read_only and version != schema.LATEST_VERSION:
                raise UserError(
                    f"database {path} has schema version {version}; "
                    "open it read-write once (the collector upgrades it)"
                )
            if version < schema.LATEST_VERSION:
                migrate(con)
        except BaseException:
            con.close()
            raise
        return cls(con, path, read_only, retention or Retention())

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._con.close()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A new cursor on this connection, for a reader in another thread."""
        return self._con.cursor()

    def checkpoint(self) -> None:
        with self._lock:
            self._con.execute("CHECKPOINT")

    def _query(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        cur = self.cursor()
        try:
            return cur.execute(sql, params).fetchall()
        finally:
            cur.close()

    @property
    def schema_version(self) -> int:
        return int(self._query(schema.READ_VERSION)[0][0])

    def samples_stored(self) -> int:
        """Raw sample rows acknowledged (committed) over the life of the database."""
        return int(self._query(schema.GET_META, ["samples_stored"])[0][0])

    def series_id(self, metric: str, labels: Labels) -> int | None:
        """The id of a series this writer knows (None for an unknown one)."""
        return self._ids.get((metric, labels))

    @contextmanager
    def _transaction(self, **tables: pa.Table) -> Iterator[duckdb.DuckDBPyConnection]:
        """One transaction on the writer connection, with Arrow tables registered by name."""
        if self.read_only:
            raise UserError(f"database {self.path} is open read-only")
        with self._lock:
            con = self._con
            for name, table in tables.items():
                con.register(name, table)
            try:
                con.execute("BEGIN TRANSACTION")
                try:
                    yield con
                except BaseException:
                    con.execute("ROLLBACK")
                    raise
                con.execute("COMMIT")
            finally:
                for name in tables:
                    con.unregister(name)

    # -- samples ----------------------------------------------------------------------------

    def append_scrape(self, batch: ScrapeBatch, *, duration_s: float = 0.0) -> int:
        """Store one scrape in one transaction; returns the sample rows stored.

        Series resolve through the in-memory cache, so a steady-state batch inserts no
        series. A series twice in one batch keeps its last sample.
        """
        ids, new, next_id = self._ids, dict[SeriesKey, int](), self._next_id
        sids: list[int] = []
        for key in zip(batch.names, batch.labels, strict=True):
            sid = ids.get(key)
            if sid is None:
                sid = new.setdefault(key, next_id + len(new))
            sids.append(sid)
        rows = dict(zip(sids, range(len(sids)), strict=True))  # series id -> its last row
        if len(rows) == len(sids):
            values, times = list(batch.values), batch.timestamps_ms
        else:
            values, times = [batch.values[i] for i in rows.values()], None
            if batch.timestamps_ms is not None:
                times = [batch.timestamps_ms[i] for i in rows.values()]
        ts_col = pa.repeat(pa.scalar(batch.ts_ms, pa.timestamp("ms")), len(rows))
        if times is not None:
            ts_col = pa.array([batch.ts_ms if t is None else t for t in times], pa.timestamp("ms"))
        table = pa.table({"series_id": pa.array(list(rows), pa.uint32()), "ts": ts_col,
                          "value": pa.array(values, pa.float64())})  # fmt: skip
        workloads = {
            tuple(lab.get(k, "") for k in INTERVAL_LABELS): lab
            for name, labels, value in zip(batch.names, batch.labels, batch.values, strict=True)
            if name == WORKLOAD_INFO and value and (lab := dict(labels))
        }
        ts = utc(batch.ts_ms / 1000)
        with self._transaction(batch=table, new_series=self._series_table(new, batch.types)) as c:
            if new:
                c.execute(Q["insert_series"], {"ts": ts})
            c.execute(Q["append_samples"])
            c.execute(Q["update_series"])
            c.execute(Q["add_samples_stored"], {"n": len(rows)})
            c.execute(Q["insert_scrape"], [batch.target, ts, True, duration_s, len(rows), None])
            still_open = self._update_intervals(c, batch.target, ts, workloads)
        ids.update(new)
        self._next_id += len(new)
        self._open[batch.target] = still_open
        return len(rows)

    @staticmethod
    def _series_table(new: Mapping[SeriesKey, int], types: Mapping[str, str]) -> pa.Table:
        cols: dict[str, list[Any]] = {c: [] for c in ("series_id", "metric", "kind")}
        cols.update({c: [] for c in (*LABEL_COLUMNS, "labels")})
        for (metric, labels), sid in new.items():
            rest = dict(labels)
            cols["series_id"].append(sid)
            cols["metric"].append(metric)
            cols["kind"].append(series_kind(metric, types))
            for column in LABEL_COLUMNS:
                cols[column].append(rest.pop(column, None))
            cols["labels"].append(list(rest.items()))
        types_ = {"series_id": pa.uint32(), "labels": pa.map_(pa.string(), pa.string())}
        return pa.table({k: pa.array(v, types_.get(k, pa.string())) for k, v in cols.items()})

    def _update_intervals(
        self,
        con: duckdb.DuckDBPyConnection,
        target: str,
        ts: datetime,
        present: Mapping[IntervalKey, Mapping[str, str]],
    ) -> set[IntervalKey]:
        """Close ``target``'s intervals that left, open those that came; returns the open."""
        was_open, params = self._open.get(target, set()), {"ts": ts, "target": target}
        gone = was_open - present.keys()
        if gone:
            rows = [dict(zip(INTERVAL_LABELS, k, strict=True)) for k in gone]
            _run_with(con, "gone", _json_records(rows, ()), Q["close_intervals"], params)
        if was_open - gone:
            con.execute(Q["touch_intervals"], params)
        opened = [lab for k, lab in present.items() if k not in was_open]
        if opened:
            _run_with(con, "opened", _json_records(opened, ()), Q["open_intervals"], params)
        return set(present)

    def record_scrape(
        self, target: str, ts: datetime | float, *, up: bool, duration_s: float = 0.0,
        error: str | None = None,
    ) -> None:  # fmt: skip
        """Record a scrape that stored no samples (``up=False``, with its error)."""
        with self._transaction() as con:
            con.execute(Q["insert_scrape"], [target, utc(ts), up, duration_s, 0, error])

    # -- retention, roll-ups, export -----------------------------------------------------

    def apply_retention(self, now: datetime) -> dict[str, int]:
        """Roll closed 5-minute and hour buckets up, then delete what is past retention.

        Raw samples are deleted only once rolled up. Returns row counts by step.
        """
        now, r = utc(now), self.retention
        with self._transaction() as con:
            lo5 = utc(_scalar(con, schema.GET_META, ["rollup_5m_until"]) or _EPOCH)
            hi5 = max(lo5, _floor(now - r.rollup_delay, 300))
            lo1h = utc(_scalar(con, schema.GET_META, ["rollup_1h_until"]) or _EPOCH)
            hi1h = max(lo1h, _floor(hi5, 3600))
            done = {
                "rolled_5m": _scalar(con, Q["rollup_5m"], {"lo": lo5, "hi": hi5}),
                "rolled_1h": _scalar(con, Q["rollup_1h"], {"lo": lo1h, "hi": hi1h}),
            }
            con.execute(schema.SET_META, ["rollup_5m_until", hi5.isoformat()])
            con.execute(schema.SET_META, ["rollup_1h_until", hi1h.isoformat()])
            raw_cut = now - timedelta(days=r.raw_days)
            cuts = {
                "samples": min(raw_cut, hi5),
                "scrapes": raw_cut,
                "5m": min(now - timedelta(days=r.rollup_5m_days), hi1h),
                "1h": now - timedelta(days=r.rollup_1h_days),
            }
            for name, cut in cuts.items():
                done[f"deleted_{name}"] = _scalar(con, Q[f"delete_{name}"], {"cut": cut})
        return done

    def export_day(self, day: date, out_dir: str | Path, *, now: datetime) -> Path:
        """Write a closed UTC day of raw samples with labels to day=YYYY-MM-DD/samples.parquet.

        The file is written beside its final name and renamed, so no reader sees half of it.
        """
        lo = datetime(day.year, day.month, day.day)
        if lo + timedelta(days=1) > utc(now):
            raise UserError(f"day {day.isoformat()} is not over yet; only closed days export")
        target = Path(out_dir) / f"day={day.isoformat()}" / "samples.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".parquet.partial")
        cur = self.cursor()
        try:
            params = {"lo": lo, "hi": lo + timedelta(days=1)}
            reader = cur.sql(Q["export_day"], params=params).to_arrow_reader(1 << 20)
            assert reader is not None
            with pq.ParquetWriter(partial, reader.schema, compression="zstd") as writer:
                for chunk in reader:
                    writer.write_batch(chunk)
        finally:
            cur.close()
        os.replace(partial, target)
        return target

    # -- inventory, findings, actions, alert state ---------------------------------------

    def record_inventory(
        self, now: datetime, *, nodes: Iterable[Any] | None = None,
        pods: Iterable[Any] | None = None, quotas: Iterable[Any] | None = None,
    ) -> None:  # fmt: skip
        """Record full snapshots (NodeInfo/PodInfo/QuotaInfo or mappings) as history.

        A changed or vanished object's current version ends at ``now``, a new or changed
        one starts there; ``None`` leaves that kind alone.
        """
        snapshots = dict(zip(INVENTORY, (nodes, pods, quotas), strict=True))
        with self._transaction() as con:
            for table, records in snapshots.items():
                if records is None:
                    continue
                recs = _json_records(records, ())["record"].to_pylist()
                keys = [INVENTORY[table](json.loads(text)) for text in recs]
                snap = dict(zip(keys, recs, strict=True))
                table_ = pa.table({"key": list(snap), "record": list(snap.values())})
                for sql in SCD_SQL[table]:
                    _run_with(con, "snap", table_, sql, {"now": utc(now)})

    def record_findings(
        self, findings: Iterable[Any], now: datetime, *, kinds: Iterable[str]
    ) -> None:
        """Upsert one detector run's findings (DESIGN.md shape, mappings or dataclasses).

        Open findings of ``kinds`` that the run no longer reports are resolved at ``now``;
        a resolved finding that recurs opens a new row.
        """
        unique = {f["id"]: f for f in map(_as_dict, findings)}.values()
        incoming = _json_records(unique, ("since", "observed_at"))
        with self._transaction(incoming=incoming) as con:
            con.execute(Q["update_findings"], {"now": utc(now)})
            con.execute(Q["insert_findings"], {"now": utc(now)})
            con.execute(Q["resolve_findings"], {"now": utc(now), "kinds": list(kinds)})

    def findings(self, *, open_only: bool = True) -> list[dict[str, Any]]:
        """Findings in the DESIGN.md shape plus ``resolved_at``, oldest observation first."""
        return [
            {**json.loads(rec), "since": since, "observed_at": seen, "resolved_at": resolved}
            for rec, since, seen, resolved in self._query(Q["select_findings"], [open_only])
        ]

    def record_actions(self, actions: Iterable[Any], now: datetime) -> None:
        """Append actions (planned or carried out) to the audit log, each kept whole as JSON.

        Each has ``id`` and ``kind``, and may have ``at`` (else ``now``), ``finding_id``,
        ``dry_run`` (default true) and ``result``.
        """
        incoming = _json_records(actions, ("at",))
        with self._transaction(incoming=incoming) as con:
            con.execute(Q["insert_actions"], {"now": utc(now)})

    def save_alert_state(self, states: Iterable[Any], now: datetime) -> None:
        """Upsert alert states by ``alert_id``: ``state``, ``since``, ``last_notified_at``."""
        incoming = _json_records(states, ("since", "last_notified_at"))
        with self._transaction(incoming=incoming) as con:
            con.execute(Q["upsert_alert_state"], {"now": utc(now)})

    def alert_states(self) -> dict[str, dict[str, Any]]:
        """Every alert's last saved record by ``alert_id``, with ``updated_at``."""
        rows = self._query(Q["select_alert_state"])
        return {aid: {**json.loads(rec), "updated_at": upd} for aid, rec, upd in rows}
