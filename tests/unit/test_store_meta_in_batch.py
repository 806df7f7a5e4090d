"""A batch and the meta keys given with it are one transaction (issue 40: a query source's
cursor is committed with the samples it covers, or neither is)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from gpuscope.collector.storage.store import Store
from tests.unit.test_store import GPU0, T0, UTIL, batch, rows


def test_meta_is_set_with_the_batch(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.duckdb") as store:
        store.append_scrape(batch(T0, (UTIL, GPU0, 0.5)), meta={"query_cursor": '{"a": 1}'})
        assert rows(store, "SELECT value FROM meta WHERE key = 'query_cursor'") == [('{"a": 1}',)]
        assert rows(store, "SELECT count(*) FROM samples") == [(1,)]


def test_a_meta_write_that_fails_takes_the_batch_with_it(tmp_path: Path) -> None:
    """The meta row is written last in the batch's transaction: when it fails, the
    samples written before it in that transaction are not stored either (and the next
    batch is stored as if the failed one never came)."""
    with Store.open(tmp_path / "s.duckdb") as store:
        store.append_scrape(batch(T0, (UTIL, GPU0, 0.5)), meta={"query_cursor": "1"})
        bad = batch(T0 + timedelta(seconds=300), (UTIL, GPU0, 0.7))
        with pytest.raises(duckdb.Error):  # meta.value is NOT NULL
            store.append_scrape(bad, meta={"query_cursor": None})  # type: ignore[dict-item]
        assert rows(store, "SELECT count(*) FROM samples") == [(1,)]
        assert rows(store, "SELECT value FROM meta WHERE key = 'query_cursor'") == [("1",)]
        store.append_scrape(bad, meta={"query_cursor": "2"})
        assert rows(store, "SELECT count(*) FROM samples") == [(2,)]
