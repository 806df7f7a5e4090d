"""The collector's DuckDB store: one writer, batched Arrow appends, roll-ups, Parquet export.

docs/storage.md describes the schema and why it is shaped so. One process (the collector)
writes through one :class:`Store`; readers in other threads use :meth:`Store.cursor`, other
processes open the file with ``read_only=True`` while no writer holds it. Every write is one
transaction, so a batch is stored whole or not at all, crash included. Times are injected
(``ts_ms``/``now``) and stored in UTC, sample times in whole seconds. SQL text is in
gpuscope/collector/storage/schema.py and gpuscope/collector/storage/sql/queries.sql and takes bound
parameters only.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import duckdb
import pyarrow as pa  # type: ignore[import-untyped]

from gpuscope.collector.storage import schema
from gpuscope.collector.storage.reader_gate import ReaderGate
from gpuscope.collector.storage.schema import begin, migrate
from gpuscope.collector.storage.store_alerts import AlertsMixin
from gpuscope.collector.storage.store_bulk import BulkMixin
from gpuscope.collector.storage.store_maintenance import MaintenanceMixin
from gpuscope.collector.storage.store_reclaim import (
    DEFAULT_MIN_FREE_RATIO,
    DEFAULT_READER_WAIT_S,
    ReclaimMixin,
)
from gpuscope.collector.storage.store_records import RecordsMixin

# re-exported: the store's public names stay here
from gpuscope.collector.storage.store_sql import (
    BadBatch,
    Labels,
    Q,
    Retention,
    is_duckdb_file,
    missing_bytes,
    read_writer_state,
    series_kind,
    utc,
)
from gpuscope.collector.storage.store_ticks import TicksMixin
from gpuscope.collector.storage.thread_scope import ThreadScope
from gpuscope.core.errors import UserError

__all__ = ["BadBatch", "Retention", "Store", "series_kind", "utc"]


class Store(BulkMixin, TicksMixin, MaintenanceMixin, ReclaimMixin, RecordsMixin, AlertsMixin):
    """The collector's database. Open with :meth:`open`; close it (or use ``with``)."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        path: Path,
        read_only: bool,
        retention: Retention,
        config: dict[str, str | bool | int | float | list[str]] | None = None,
    ) -> None:
        self.path, self.read_only, self.retention = path, read_only, retention
        self._con = con
        #: DuckDB's settings ``con`` was opened with, for a reconnect (reclaim_space)
        self._config = dict(config or {})
        self._lock = threading.RLock()  # the writer connection
        self._maintenance = threading.RLock()  # roll-ups, deletes and compaction: one at a time
        #: Readers' cursors, counted so that a file swap (reclaim_space) waits for them.
        self._readers = ReaderGate()
        #: Set while reclaim_space rewrites the file: writes that come wait for it.
        self._rewriting = threading.Event()
        #: Writes (scrape batches, records) that waited for a rewrite of the file.
        self.writes_waited = 0
        #: DuckDB's threads lowered while a scheduled job runs (thread_scope.py).
        self.thread_scope = ThreadScope(self.cursor)
        self._load_writer_state(con, read_only)

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        read_only: bool = False,
        retention: Retention | None = None,
        memory_limit: str | None = None,
        threads: int | None = None,
    ) -> Store:
        """Open (creating it if absent, unless read-only) and migrate the database at ``path``.

        Raises :class:`UserError` with one line for a file that is not a DuckDB database
        (left untouched), a database of a newer gpuscope, or a read-only open of a missing
        or not yet upgraded database. ``memory_limit`` is DuckDB's (``collector.db_memory_limit``;
        None keeps DuckDB's default, 80 % of RAM).
        """
        path = Path(path)
        if path.exists() and (path.is_dir() or not is_duckdb_file(path)):
            raise UserError(f"{path} is not a DuckDB database; refusing to open or overwrite it")
        if read_only and not path.exists():
            raise UserError(f"database {path} does not exist")
        try:
            # a new file gets the store's block size (an existing one keeps its own)
            config: dict[str, str | bool | int | float | list[str]] = {
                "default_block_size": schema.BLOCK_SIZE
            }
            if memory_limit is not None:
                config["memory_limit"] = memory_limit
            if threads is not None:
                config["threads"] = threads
            con = duckdb.connect(str(path), read_only=read_only, config=config)
        except duckdb.Error as exc:
            raise UserError(f"cannot open database {path}: {str(exc).splitlines()[0]}") from None
        try:
            # an in-memory database (":memory:") has no file to measure
            missing = missing_bytes(con, path) if path.is_file() else 0
            if missing:
                raise UserError(
                    f"cannot read database {path} (damaged or truncated?): at least {missing} "
                    "bytes of its end are missing (restore it from a backup, or move it away)"
                )
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
            if read_only:  # read-write: the writer's state is loaded below, the same reads
                read_writer_state(con)
        except duckdb.Error as exc:  # a damaged file: a header DuckDB accepts, pages it cannot
            con.close()
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise UserError(
                f"cannot read database {path} (damaged or truncated?): {first}"
            ) from None
        except BaseException:
            con.close()
            raise
        try:
            return cls(con, path, read_only, retention or Retention(), config)
        except duckdb.Error as exc:  # the writer's state (every series) read from damaged pages
            con.close()
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise UserError(
                f"cannot read database {path} (damaged or truncated?): {first}"
            ) from None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Fold the writer's log into series and meta (writer_log.py), then close."""
        with self._lock:
            if not self.read_only:
                # a database that cannot write: the next open folds the log
                with contextlib.suppress(duckdb.Error):
                    self.fold_log()
            self._con.close()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A new cursor on this connection, for a reader in another thread; close it when
        done (a rewrite of the file waits for it). While the file is being swapped
        (:meth:`reclaim_space`), it waits for the new connection."""
        lease = self._readers.lease(self._new_cursor)
        return cast(duckdb.DuckDBPyConnection, lease)

    @property
    def readers_waited(self) -> int:
        """Cursors that waited for a swap of the file to end (since opened)."""
        return self._readers.waited

    def _new_cursor(self) -> duckdb.DuckDBPyConnection:
        return self._con.cursor()  # the connection of the moment (a swap replaces it)

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """The writer connection, held; a write that comes during a rewrite is counted."""
        if self._rewriting.is_set():
            self.writes_waited += 1
        with self._readers.waiting_to_write():
            self._lock.acquire()
        try:
            yield
        finally:
            self._lock.release()

    def maintain(
        self,
        now: datetime,
        *,
        reclaim_free_ratio: float | None = DEFAULT_MIN_FREE_RATIO,
        reader_wait_s: float = DEFAULT_READER_WAIT_S,
    ) -> dict[str, int]:
        """The running collector's maintenance: :meth:`apply_retention` (roll-ups, deletes,
        compaction of closed days and segments), then the file rewritten without its free
        blocks when they are ``reclaim_free_ratio`` of it or more (None: never). Returns
        the row counts by step and ``reclaimed_bytes``."""
        done = self.apply_retention(now)
        if reclaim_free_ratio is not None:
            report = self.reclaim_space(
                min_free_ratio=reclaim_free_ratio, reader_wait_s=reader_wait_s
            )
            done["reclaimed_bytes"] = report.reclaimed_bytes
        return done

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
        """Raw sample rows acknowledged (committed) over the life of the database: the
        writer's count; read-only, meta's and its log's (writer_log.py)."""
        if not self.read_only:
            return self._stored_total
        logged = int(self._query(Q["samples_logged"])[0][0])
        return int(self._query(schema.GET_META, ["samples_stored"])[0][0]) + logged

    def series_id(self, metric: str, labels: Labels) -> int | None:
        """The id of a series this writer knows (None for an unknown one)."""
        return self._ids.get((metric, labels))

    def is_new_series(self, metric: str, labels: Labels) -> bool:
        return (metric, labels) not in self._ids

    @property
    def series_known(self) -> int:
        """Series this writer holds in memory (every series of the database)."""
        return len(self._ids)

    def probe_write(self) -> None:
        """One tiny committed write: raises when the database cannot write at all (a full
        disk, an I/O error, a database DuckDB has invalidated)."""
        with self._transaction() as con:
            con.execute(Q["probe_write"])

    @contextmanager
    def _transaction(self, **tables: pa.Table) -> Iterator[duckdb.DuckDBPyConnection]:
        """One transaction on the writer connection, with Arrow tables registered by name."""
        if self.read_only:
            raise UserError(f"database {self.path} is open read-only")
        with self._writing():
            for name, table in tables.items():
                self._con.register(name, table)
            try:
                with begin(self._con) as con:
                    yield con
            finally:
                for name in tables:
                    self._con.unregister(name)
