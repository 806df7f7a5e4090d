"""DuckDB's threads lowered while the collector's scheduled jobs run.

DuckDB runs a query on as many threads as its ``threads`` setting allows. For the API's
reads of a week of samples that is what makes them answer in time; for the scheduled
analytics and alert rules, dozens of queries of a few thousand rows every five minutes,
the second thread only adds work: partitioned hash tables merged again, tasks handed
between threads, a worker woken for a pipeline of one vector. Measured (issue 39) on a
2-core machine: the job over 8 nodes' hour-old store (bench/analytics_job.py), three
interleaved pairs, 432-594 ms of CPU a run at one thread against 576-623 ms at DuckDB's
default of two (its detectors' wall time then longer: idle 190-268 ms against 193-198);
and a fresh collector on 8 agents, 5 minutes that held one run, 1.13 s against 1.18 s
beside it.

The setting is the database's (DuckDB has no per-connection thread count), so a read that
the API answers while a job runs runs on the lowered count too; a job takes about half a
second every five minutes. Scopes may overlap (two jobs at once): the first to enter
lowers the count, the last to leave sets back what the database had before the first.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

import duckdb

log = logging.getLogger(__name__)

#: Read the database's thread count (a global setting; the same from every cursor).
GET_THREADS = "SELECT current_setting('threads')"


def set_threads(cur: duckdb.DuckDBPyConnection, threads: int) -> None:
    """Set the database's thread count (SET takes no bound parameter; an int is safe)."""
    cur.execute(f"SET GLOBAL threads = {int(threads)}")


class ThreadScope:
    """Lowers DuckDB's threads while at least one scope is open; see the module."""

    def __init__(self, cursor: Callable[[], duckdb.DuckDBPyConnection]) -> None:
        self._cursor = cursor
        self._lock = threading.Lock()
        self._open = 0
        self._before: int | None = None

    @contextlib.contextmanager
    def lowered(self, threads: int | None) -> Iterator[None]:
        """Run the body with DuckDB's threads at most ``threads`` (None: unchanged)."""
        if threads is None:
            yield
            return
        self._enter(threads)
        try:
            yield
        finally:
            self._leave()

    def _enter(self, threads: int) -> None:
        with self._lock:
            self._open += 1
            if self._open > 1:
                return
            try:
                cur = self._cursor()
                try:
                    before = int(cur.execute(GET_THREADS).fetchall()[0][0])
                    if threads < before:
                        set_threads(cur, threads)
                        self._before = before
                finally:
                    cur.close()
            except duckdb.Error as exc:  # the job runs anyway, as it would have
                log.warning("cannot lower DuckDB's threads: %s", str(exc).splitlines()[0])

    def _leave(self) -> None:
        with self._lock:
            self._open -= 1
            if self._open > 0 or self._before is None:
                return
            before, self._before = self._before, None
            try:
                cur = self._cursor()
                try:
                    set_threads(cur, before)
                finally:
                    cur.close()
            except duckdb.Error as exc:
                log.warning("cannot set DuckDB's threads back: %s", str(exc).splitlines()[0])
