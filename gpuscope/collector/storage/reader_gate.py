"""Readers' cursors on the store's one connection, and the gate a file swap closes.

A running collector rewrites its database into a fresh file to give free blocks back
(store_reclaim.py): it closes its connection and opens the new file. A cursor is a child of
that connection, so a reader in another thread (the HTTP API, analytics, alerts) that still
held one would get "connection already closed". :meth:`ReaderGate.lease` hands each reader
its cursor wrapped in a :class:`CursorLease`, counted until it is closed (or dropped);
:meth:`ReaderGate.closed` stops new leases, waits (bounded) for the ones out to come back,
and opens again after the swap. A reader that asks meanwhile waits for the new connection;
a thread that already holds a lease gets another at once (it would otherwise wait on itself).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import duckdb


class CursorLease:
    """A reader's cursor (every attribute is the cursor's), counted by its gate until
    :meth:`close` (or until it is garbage collected)."""

    __slots__ = ("_cur", "_release")

    def __init__(self, cur: duckdb.DuckDBPyConnection, release: Callable[[], None]) -> None:
        self._cur = cur
        self._release: Callable[[], None] | None = release

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)

    def close(self) -> None:
        try:
            self._cur.close()
        finally:
            self._done()

    def _done(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    def __enter__(self) -> CursorLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self._done()


class ReaderGate:
    """Counts the cursors out per thread; closes to new ones while a file is swapped."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._out: dict[int, int] = {}  # thread id -> leases it holds
        self._closed = False
        #: Threads that hold a lease and wait for the writer connection: a swap that holds
        #: the writer cannot wait for their leases (they would wait for each other).
        self._blocked: set[int] = set()
        #: Cursors that had to wait for a swap to end (since start).
        self.waited = 0

    def lease(self, open_cursor: Callable[[], duckdb.DuckDBPyConnection]) -> CursorLease:
        """A cursor from ``open_cursor``, once the gate is open (or this thread holds one)."""
        me = threading.get_ident()
        with self._cond:
            if self._closed and not self._out.get(me):
                self.waited += 1
                self._cond.wait_for(lambda: not self._closed)
            cur = open_cursor()
            self._out[me] = self._out.get(me, 0) + 1
        return CursorLease(cur, lambda: self._release(me))

    def _release(self, me: int) -> None:
        with self._cond:
            left = self._out.get(me, 0) - 1
            if left > 0:
                self._out[me] = left
            else:
                self._out.pop(me, None)
            self._cond.notify_all()

    @contextmanager
    def waiting_to_write(self) -> Iterator[None]:
        """Around a wait for the writer connection: a thread that holds a cursor (a job
        that reads, then writes what it found) makes a swap waiting for its cursor give up
        at once instead of at its timeout."""
        me = threading.get_ident()
        with self._cond:
            holds = bool(self._out.get(me))
            if holds:
                self._blocked.add(me)
                self._cond.notify_all()
        try:
            yield
        finally:
            if holds:
                with self._cond:
                    self._blocked.discard(me)

    def out(self) -> int:
        """Cursors leased and not yet given back, by every thread."""
        with self._cond:
            return sum(self._out.values())

    @contextmanager
    def closed(self, timeout: float) -> Iterator[bool]:
        """Closed to new leases of other threads while the block runs; yields whether every
        other thread's lease came back within ``timeout`` seconds (if not, the caller must
        leave the connection alone). It gives up at once when a thread that holds a lease
        waits for the writer connection (which the caller holds). The calling thread's own
        leases are not waited for."""
        me = threading.get_ident()

        def drained() -> bool:
            return all(t == me for t in self._out)

        def stuck() -> bool:
            return any(t in self._blocked for t in self._out if t != me)

        with self._cond:
            self._closed = True
            self._cond.wait_for(lambda: drained() or stuck(), timeout=timeout)
            done = drained()
        try:
            yield done
        finally:
            with self._cond:
                self._closed = False
                self._cond.notify_all()
