"""Give a database file's free space back to the file system: rewrite it into a fresh file.

DuckDB (2.0.1) reuses the blocks that deletes, compaction and retention free, but never
shrinks its file: after a week of history is rolled up and compacted, a quarter of a file
can be free blocks. :meth:`ReclaimMixin.reclaim_space` copies the database into a new file
beside it (``ATTACH`` + ``COPY FROM DATABASE``: every table, view and row, rows in the
order stored, so compacted days stay sorted), makes it durable, and renames it over the old
one. The old file stays whole until the rename, so a crash at any step loses nothing: it
leaves the old database and at most a stale ``.reclaim`` file, which the next run removes.

The running collector calls it after its maintenance (docs/storage.md, "Giving space
back"): writes wait for it on the writer connection and are committed to the new file
after; the store's connection is closed and opened again on the new file only once every
reader's cursor (:meth:`Store.cursor`, counted by reader_gate.py) is back, and readers that
ask meanwhile wait for the new connection.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb

from gpuscope.collector.storage import schema
from gpuscope.collector.storage.reader_gate import ReaderGate
from gpuscope.collector.storage.store_sql import StoreParts
from gpuscope.core.errors import UserError

log = logging.getLogger(__name__)

#: A rewrite costs a read and a write of the whole database; below this share of free
#: space it is not worth it unless asked for (``min_free_ratio=0``).
DEFAULT_MIN_FREE_RATIO = 0.2
#: How long a rewrite waits for readers' cursors before it gives up, this time.
DEFAULT_READER_WAIT_S = 30.0
#: The name the new file is written under, beside the database, until it is complete.
PARTIAL_SUFFIX = ".reclaim"


@dataclass(frozen=True)
class SpaceReport:
    """A database file's space, and what a rewrite did (or would do, on a dry run)."""

    file_bytes: int  #: the file's size before
    free_bytes: int  #: free blocks inside it (what a rewrite gives back, at least)
    rewritten: bool  #: whether the file was rewritten
    new_file_bytes: int | None = None  #: the file's size after a rewrite

    @property
    def reclaimed_bytes(self) -> int:
        """Bytes given back (0 when not rewritten)."""
        return 0 if self.new_file_bytes is None else self.file_bytes - self.new_file_bytes


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _quote(text: str) -> str:
    """A SQL string literal (ATTACH takes no bound parameter)."""
    return "'" + text.replace("'", "''") + "'"


class ReclaimMixin(StoreParts):
    """:meth:`reclaim_space` of a :class:`~gpuscope.collector.storage.store.Store`."""

    _con: duckdb.DuckDBPyConnection
    _config: dict[str, str | bool | int | float | list[str]]
    _lock: threading.RLock
    _readers: ReaderGate
    _rewriting: threading.Event
    writes_waited: int
    #: Rewrites of the file since the store was opened, and the last one's seconds.
    rewrites = 0
    last_rewrite_s = 0.0

    def space(self) -> SpaceReport:
        """The file's size and its free blocks (``PRAGMA database_size``), after a checkpoint."""
        with self._lock:
            if not self.read_only:
                self._con.execute("CHECKPOINT")
            row = self._con.execute("PRAGMA database_size").fetchone()
        assert row is not None
        block_size, free_blocks = int(row[2]), int(row[5])
        size = self.path.stat().st_size
        return SpaceReport(file_bytes=size, free_bytes=free_blocks * block_size, rewritten=False)

    def reclaim_space(
        self,
        *,
        dry_run: bool = False,
        min_free_ratio: float = DEFAULT_MIN_FREE_RATIO,
        reader_wait_s: float = DEFAULT_READER_WAIT_S,
    ) -> SpaceReport:
        """Rewrite the database into a fresh file when its free blocks are at least
        ``min_free_ratio`` of it (0: always); ``dry_run`` only reports.

        Safe while the collector runs: writes wait for the rewrite (the writer connection is
        held throughout, so nothing committed is missed and nothing waiting is lost: it is
        committed after, to the new file); readers go on during the copy, and the swap waits
        up to ``reader_wait_s`` for the cursors out to be closed (new ones wait for the new
        connection). If they are not back by then, the copy is dropped and the file left as
        it was (``rewritten`` False), to be tried at the next maintenance.
        """
        if self.read_only:
            raise UserError(f"database {self.path} is open read-only")
        with self._maintenance, self._lock:
            self._rewriting.set()
            try:
                return self._reclaim(dry_run, min_free_ratio, reader_wait_s)
            finally:
                self._rewriting.clear()

    def _reclaim(self, dry_run: bool, min_free_ratio: float, reader_wait_s: float) -> SpaceReport:
        started = time.monotonic()
        waited = self.writes_waited
        before = self.space()
        worth = before.free_bytes > 0 and before.free_bytes >= min_free_ratio * before.file_bytes
        if dry_run or not worth:
            return before
        partial = self.path.with_name(self.path.name + PARTIAL_SUFFIX)
        for stale in (partial, partial.with_name(partial.name + ".wal")):
            stale.unlink(missing_ok=True)  # a run that crashed before its rename
        try:
            self._copy_to(partial)
            _fsync(partial)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        with self._readers.closed(reader_wait_s) as drained:
            if not drained:
                partial.unlink(missing_ok=True)
                log.warning(
                    "space not reclaimed this time: a reader kept its cursor (waited up to "
                    "%.0fs, or it waits to write) db=%s",
                    reader_wait_s,
                    self.path,
                )
                return before
            self._con.close()  # checkpoints: no WAL of the old file may outlive it
            wal = self.path.with_name(self.path.name + ".wal")
            try:
                if wal.exists():  # never replay an old log onto the new file
                    raise UserError(f"database {self.path} left a WAL on close; not replacing it")
                os.replace(partial, self.path)
                _fsync(self.path.parent)
            finally:  # replaced or not, the store goes on with whichever file is there
                partial.unlink(missing_ok=True)
                self._con = duckdb.connect(str(self.path), config=self._config)
        after = self.path.stat().st_size
        self.rewrites += 1
        self.last_rewrite_s = time.monotonic() - started
        log.info(
            "reclaimed space db=%s before_bytes=%d after_bytes=%d seconds=%.1f writes_waited=%d",
            self.path,
            before.file_bytes,
            after,
            self.last_rewrite_s,
            self.writes_waited - waited,
        )
        return SpaceReport(before.file_bytes, before.free_bytes, True, after)

    def _copy_to(self, partial: Path) -> None:
        """Copy every table and view into a new database file at ``partial``, checkpointed."""
        con = self._con
        name = con.execute("SELECT current_database()").fetchone()
        assert name is not None
        source = '"' + str(name[0]).replace('"', '""') + '"'
        con.execute(
            f"ATTACH {_quote(str(partial))} AS gpuscope_reclaim (BLOCK_SIZE {schema.BLOCK_SIZE})"
        )
        try:
            con.execute(f"COPY FROM DATABASE {source} TO gpuscope_reclaim")
            con.execute("CHECKPOINT gpuscope_reclaim")
        finally:
            con.execute("DETACH gpuscope_reclaim")
