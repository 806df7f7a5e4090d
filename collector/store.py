"""The collector's DuckDB store: one writer, batched Arrow appends, roll-ups, Parquet export.

docs/storage.md describes the schema and why it is shaped so. One process (the collector)
writes through one :class:`Store`; readers in other threads use :meth:`Store.cursor`, other
processes open the file with ``read_only=True`` while no writer holds it. Every write is one
transaction, so a batch is stored whole or not at all, crash included. Times are injected
(``ts_ms``/``now``) and stored in UTC, sample times in whole seconds. SQL text is in
collector/schema.py and collector/sql/queries.sql and takes bound parameters only.
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
from typing import Any

import duckdb
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from collector import schema
from collector.batch import Batch
from collector.schema import begin, migrate, scalar
from gpuscope.errors import UserError

Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, Labels]
#: namespace, pod, container, node, gpu uuid
IntervalKey = tuple[str, ...]

#: Labels that get their own column in ``series``; every other label goes in its map.
LABEL_COLUMNS: tuple[str, ...] = ("node", "gpu", "uuid", "mig_instance", "device", "port")
LABEL_COLUMNS += ("namespace", "pod", "container")
INTERVAL_LABELS = ("namespace", "pod", "container", "node", "uuid")
WORKLOAD_INFO = "gpuscope_gpu_workload_info"
_EPOCH = datetime(1970, 1, 1)


def _load_queries() -> dict[str, str]:
    text = files("collector").joinpath("sql", "queries.sql").read_text(encoding="utf-8")
    parts = re.split(r"^-- name: (\w+)\n", text, flags=re.MULTILINE)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


#: Named queries from collector/sql/queries.sql.
Q = _load_queries()
#: Inventory table -> the key of a record (one current version per key).
INVENTORY = {
    "inventory_nodes": lambda r: str(r["name"]),
    "inventory_pods": lambda r: f"{r['namespace']}/{r['name']}",
    "quotas": lambda r: f"{r.get('source', '')}/{r.get('namespace', '')}/{r['project']}",
}
SCD_SQL = {t: (Q["scd_close"].format(table=t), Q["scd_open"].format(table=t)) for t in INVENTORY}


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


class Store:
    """The collector's database. Open with :meth:`open`; close it (or use ``with``)."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection, path: Path, read_only: bool, retention: Retention
    ) -> None:
        self.path, self.read_only, self.retention = path, read_only, retention
        self._con = con
        self._lock = threading.RLock()  # the writer connection
        self._maintenance = threading.RLock()  # roll-ups, deletes and compaction: one at a time
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
            version = schema.schema_version(con)
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
            for name, table in tables.items():
                self._con.register(name, table)
            try:
                with begin(self._con) as con:
                    yield con
            finally:
                for name in tables:
                    self._con.unregister(name)

    # -- samples ----------------------------------------------------------------------------

    def append_scrape(self, batch: Batch, *, duration_s: float = 0.0) -> int:
        """Store one scrape in one transaction; returns the sample rows stored.

        ``batch.labels[i]`` are sorted by name; ``batch.types`` maps a family (a counter's
        name without ``_total``) to its type. Series resolve through the in-memory cache, so
        a steady-state batch inserts no series. A series twice in a batch keeps its last.
        Thread-safe: batches are resolved and written one at a time.
        """
        with self._lock:
            return self._append(batch, duration_s)

    def _append(self, batch: Batch, duration_s: float) -> int:
        ids, new, next_id = self._ids, dict[SeriesKey, int](), self._next_id
        sids: list[int] = []
        for key in zip(batch.names, batch.labels, strict=True):
            sid = ids.get(key)
            if sid is None:
                sid = new.setdefault(key, next_id + len(new))
            sids.append(sid)
        last = dict(zip(sids, range(len(sids)), strict=True))  # series id -> its last sample
        keep = None if len(last) == len(sids) else list(last.values())
        values = list(batch.values) if keep is None else [batch.values[i] for i in keep]
        secs: Any = pa.repeat(pa.scalar(batch.ts_ms // 1000, pa.timestamp("s")), len(last))
        if (times := batch.timestamps_ms) is not None:
            times = times if keep is None else [times[i] for i in keep]
            secs = [(batch.ts_ms if t is None else t) // 1000 for t in times]
        columns = [pa.array(list(last), pa.uint32()), pa.array(secs, pa.timestamp("s"))]
        columns.append(pa.array(values, pa.float64()))
        table = pa.table(columns, names=["series_id", "ts", "value"])
        workloads = {
            tuple(lab.get(k, "") for k in INTERVAL_LABELS): lab
            for name, labels, value in zip(batch.names, batch.labels, batch.values, strict=True)
            if name == WORKLOAD_INFO and value and (lab := dict(labels))
        }
        ts = utc(batch.ts_ms / 1000)
        tables = {"batch": table} | (
            {"new_series": self._series_table(new, batch.types)} if new else {}
        )
        with self._transaction(**tables) as c:
            if new:
                c.execute(Q["insert_series"], {"ts": ts})
            c.execute(Q["append_samples"])
            c.execute(Q["update_series"])
            c.execute(Q["add_samples_stored"], {"n": len(last)})
            c.execute(Q["insert_scrape"], [batch.target, ts, True, duration_s, len(last), None])
            still_open = self._update_intervals(c, batch.target, ts, workloads)
        ids.update(new)
        self._next_id += len(new)
        self._open[batch.target] = still_open
        return len(last)

    def append_cycle(
        self,
        batches: Sequence[tuple[Batch, float]],
        down: Sequence[tuple[str, float, float, str]] = (),
    ) -> list[int]:
        """Store a whole scrape cycle in one transaction; returns rows stored per batch.

        ``batches`` are the targets that answered, each with its scrape duration; ``down``
        the ones that did not, as (target, Unix time, duration, error). A transaction costs
        a few milliseconds whatever its size, so a cycle of a thousand targets in one is
        what keeps a 15 s interval affordable; the cycle is then also the unit of crash
        safety (committed whole, or not at all).
        """
        with self._lock:
            return self._append_many(batches, down)

    def _append_many(
        self,
        batches: Sequence[tuple[Batch, float]],
        down: Sequence[tuple[str, float, float, str]],
    ) -> list[int]:
        ids, new, next_id = self._ids, dict[SeriesKey, int](), self._next_id
        all_sids: list[int] = []
        all_secs: list[int] = []
        all_values: list[float] = []
        counts: list[int] = []
        types: dict[str, str] = {}
        get = ids.get
        for batch, _ in batches:
            types.update(batch.types)
            keys = list(zip(batch.names, batch.labels, strict=True))
            sids = [get(k) for k in keys]
            if None in sids:  # new series: ids in order of first appearance
                for i, sid in enumerate(sids):
                    if sid is None:
                        sids[i] = new.setdefault(keys[i], next_id + len(new))
            secs = batch.ts_ms // 1000
            times = batch.timestamps_ms
            if times is not None and any(t is not None for t in times):
                all_secs += [secs if t is None else t // 1000 for t in times]
            else:
                all_secs += [secs] * len(sids)
            all_sids += sids  # type: ignore[arg-type]
            all_values += batch.values
            counts.append(len(set(sids)))
        if len(set(all_sids)) != len(all_sids):  # a series twice: its last sample wins
            last = {sid: i for i, sid in enumerate(all_sids)}
            keep = sorted(last.values())
            all_sids = [all_sids[i] for i in keep]
            all_secs = [all_secs[i] for i in keep]
            all_values = [all_values[i] for i in keep]
        rows = all_sids
        sample_table = pa.table(
            [pa.array(all_sids, pa.uint32()), pa.array(all_secs, pa.timestamp("s")),
             pa.array(all_values, pa.float64())],
            names=["series_id", "ts", "value"],
        )  # fmt: skip
        scrape_rows: list[tuple[str, datetime, bool, float, int, str | None]] = []
        touch: dict[str, list[Any]] = {"target": [], "ts": []}
        interval_work = []
        for (batch, duration), n in zip(batches, counts, strict=True):
            ts = utc(batch.ts_ms / 1000)
            scrape_rows.append((batch.target, ts, True, duration, n, None))
            present = {
                tuple(lab.get(k, "") for k in INTERVAL_LABELS): lab
                for name, labels, value in zip(batch.names, batch.labels, batch.values, strict=True)
                if name == WORKLOAD_INFO and value and (lab := dict(labels))
            }
            was_open = self._open.get(batch.target, set())
            if was_open & present.keys():
                touch["target"].append(batch.target)
                touch["ts"].append(ts)
            if present.keys() != was_open:
                interval_work.append((batch.target, ts, present))
            else:
                self._open[batch.target] = set(present)
        scrape_rows += [(t, utc(when), False, d, 0, err) for t, when, d, err in down]
        cols: list[tuple[Any, ...]] = list(zip(*scrape_rows, strict=True)) or [()] * 6
        tables = {
            "batch": sample_table,
            "cycle_scrapes": pa.table({
                "target": pa.array(cols[0], pa.string()),
                "ts": pa.array(cols[1], pa.timestamp("us")),
                "up": pa.array(cols[2], pa.bool_()),
                "duration_s": pa.array(cols[3], pa.float64()),
                "samples": pa.array(cols[4], pa.uint32()),
                "error": pa.array(cols[5], pa.string()),
            }),
            "cycle_touch": pa.table({"target": pa.array(touch["target"], pa.string()),
                                     "ts": pa.array(touch["ts"], pa.timestamp("us"))}),
        }  # fmt: skip
        if new:
            tables["new_series"] = self._series_table(new, types)
        first_ts = utc(batches[0][0].ts_ms / 1000) if batches else utc(0)
        with self._transaction(**tables) as c:
            if new:
                c.execute(Q["insert_series"], {"ts": first_ts})
            if rows:
                c.execute(Q["append_samples"])
                c.execute(Q["update_series"])
                c.execute(Q["add_samples_stored"], {"n": len(rows)})
            c.execute(Q["insert_scrapes"])
            if touch["target"]:
                c.execute(Q["touch_intervals_many"])
            still_open = {
                target: self._update_intervals(c, target, when, present, touch=False)
                for target, when, present in interval_work
            }
        ids.update(new)
        self._next_id += len(new)
        self._open.update(still_open)
        return counts

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
        *,
        touch: bool = True,
    ) -> set[IntervalKey]:
        """Close ``target``'s intervals that left, open those that came; returns the open.

        ``touch=False`` leaves the still-open intervals' ``last_seen`` to the caller (a cycle
        touches all its targets in one statement).
        """
        was_open, params = self._open.get(target, set()), {"ts": ts, "target": target}
        gone = was_open - present.keys()
        if gone:
            rows = [dict(zip(INTERVAL_LABELS, k, strict=True)) for k in gone]
            _run_with(con, "gone", _json_records(rows, ()), Q["close_intervals"], params)
        if touch and was_open - gone:
            con.execute(Q["touch_intervals"], params)
        opened = [lab for k, lab in present.items() if k not in was_open]
        if opened:
            _run_with(con, "opened", _json_records(opened, ()), Q["open_intervals"], params)
        return set(present)

    def record_scrape(
        self,
        target: str,
        ts: datetime | float,
        *,
        up: bool,
        duration_s: float = 0.0,
        error: str | None = None,
    ) -> None:
        """Record a scrape that stored no samples (``up=False``, with its error)."""
        with self._transaction() as con:
            con.execute(Q["insert_scrape"], [target, utc(ts), up, duration_s, 0, error])

    # -- retention, roll-ups, export -----------------------------------------------------

    def apply_retention(self, now: datetime) -> dict[str, int]:
        """Roll closed 5-minute and hour buckets up, delete what is past retention, then
        compact closed days (:meth:`compact`). Raw samples go only once rolled up.
        Returns row counts by step.
        """
        now, r = utc(now), self.retention
        with self._maintenance:
            with self._transaction() as con:
                lo5 = utc(scalar(con, schema.GET_META, ["rollup_5m_until"]) or _EPOCH)
                hi5 = max(lo5, _floor(now - r.rollup_delay, 300))
                lo1h = utc(scalar(con, schema.GET_META, ["rollup_1h_until"]) or _EPOCH)
                hi1h = max(lo1h, _floor(hi5, 3600))
                done = {
                    "rolled_5m": scalar(con, Q["rollup_5m"], {"lo": lo5, "hi": hi5}),
                    "rolled_1h": scalar(con, Q["rollup_1h"], {"lo": lo1h, "hi": hi1h}),
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
                    done[f"deleted_{name}"] = scalar(con, Q[f"delete_{name}"], {"cut": cut})
            done["compacted"] = self.compact(now)
        return done

    def compact(self, now: datetime) -> int:
        """Rewrite each closed UTC day's samples sorted by (series_id, ts), once a day.

        Scrape order interleaves metrics, which compresses poorly; per-series runs compress
        to about half (docs/storage.md). Runs on its own cursor, one transaction a day, so
        appends of new samples go on meanwhile. Returns the rows rewritten.
        """
        if self.read_only:
            raise UserError(f"database {self.path} is open read-only")
        before = _floor(utc(now) - self.retention.rollup_delay, 86400)
        rows, cur = 0, self.cursor()
        with self._maintenance:
            try:
                day = scalar(cur, Q["first_uncompacted_day"])
                while day is not None and (lo := datetime(day.year, day.month, day.day)) < before:
                    span = {"lo": lo, "hi": lo + timedelta(days=1)}
                    with begin(cur):
                        top = scalar(cur, Q["max_rowid"])
                        n = scalar(cur, Q["compact_copy"], span)
                        cur.execute(Q["compact_delete"], {**span, "max_rowid": top})
                        cur.execute(Q["compact_done"], {"day": day, "now": utc(now), "rows": n})
                    rows, day = rows + n, day + timedelta(days=1)
            finally:
                cur.close()
        return rows

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
        self,
        now: datetime,
        *,
        nodes: Iterable[Any] | None = None,
        pods: Iterable[Any] | None = None,
        quotas: Iterable[Any] | None = None,
    ) -> None:
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
