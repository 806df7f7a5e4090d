"""Compaction puts a metric's series side by side: a row group then holds values of one
kind (ratios with ratios), which DuckDB compresses alike; series ids, given in order of
first appearance, interleave a node's metrics."""

from datetime import datetime, timedelta
from pathlib import Path

from gpuscope.collector.storage.store import Store
from tests.unit.test_store import ENERGY, GPU0, GPU1, UTIL, batch, rows


def test_compaction_orders_a_closed_day_by_metric_then_series(tmp_path: Path) -> None:
    start = datetime(2025, 3, 3, 23, 0)
    with Store.open(tmp_path / "g.duckdb") as store:
        for i in range(4):  # ids in order of appearance: UTIL/GPU0, ENERGY/GPU0, UTIL/GPU1
            store.append_scrape(
                batch(
                    start + timedelta(seconds=15 * i),
                    (UTIL, GPU0, i / 8),
                    (ENERGY, GPU0, 10.0 * i),
                    (UTIL, GPU1, i / 4),
                )
            )
        ids = dict(rows(store, "SELECT metric || '/' || gpu, series_id FROM series"))
        before = sorted(rows(store, "SELECT series_id, ts, value FROM samples"))
        assert store.compact(datetime(2025, 3, 4, 1, 0)) == 12
        assert sorted(rows(store, "SELECT series_id, ts, value FROM samples")) == before
        order = rows(store, "SELECT series_id, ts FROM samples ORDER BY rowid")
        # energy's series first (its metric sorts first), then utilization's two, each
        # whole; every other one runs backwards in time
        runs = [ids[f"{ENERGY}/0"], ids[f"{UTIL}/0"], ids[f"{UTIL}/1"]]
        assert [r[0] for r in order] == [s for s in runs for _ in range(4)]
        assert order[0:4] == sorted(order[0:4])
        assert order[4:8] == sorted(order[4:8], reverse=True)
        assert order[8:12] == sorted(order[8:12])
