"""bench/history_fast.py: the vectorised span holds what the ingest path would have stored.

The same small history is built twice, once wholly through ``CycleMaker`` and
``Store.append_cycle`` with the store's hourly maintenance, once with its first hours
vectorised (and rolled up by the store's own ``apply_retention``) and only the last hour
through the ingest path; every raw sample, 5-minute and hourly roll-up row, series row and
workload interval of the families the vectorised span writes must be equal (a roll-up's
floating-point sum to the last bits its row order decides).
"""

from pathlib import Path
from typing import Any

import pytest

import bench.history_fast as fast
from bench.history import HistorySize, build
from gpuscope.collector.storage.store import Store

_WHICH = "SELECT unnest($names)"
_SERIES = (
    "metric, kind, node, gpu, uuid, mig_instance, device, port, namespace, pod, container, "
    "CAST(labels AS VARCHAR)"
)
QUERIES = {
    "samples": f"SELECT {_SERIES}, ts, value FROM samples JOIN series USING (series_id) "
    f"WHERE metric IN ({_WHICH}) ORDER BY ALL",
    "samples_5m": f"SELECT {_SERIES}, bucket, max, sum, count FROM samples_5m "
    f"JOIN series USING (series_id) WHERE metric IN ({_WHICH}) ORDER BY ALL",
    "samples_1h": f"SELECT {_SERIES}, bucket, max, sum, count FROM samples_1h "
    f"JOIN series USING (series_id) WHERE metric IN ({_WHICH}) ORDER BY ALL",
    "series": f"SELECT {_SERIES}, first_seen, last_seen, last_raw FROM series "
    f"WHERE metric IN ({_WHICH}) ORDER BY ALL",
    "intervals": "SELECT * FROM workload_intervals WHERE $names IS NOT NULL ORDER BY ALL",
    "pods": "SELECT key, valid_from, valid_to FROM inventory_pods "
    "WHERE $names IS NOT NULL ORDER BY ALL",
}


def _tables(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    with Store.open(path, read_only=True) as store:
        cur = store.cursor()
        out = {
            name: cur.execute(sql, {"names": list(fast.GENERATED)}).fetchall()
            for name, sql in QUERIES.items()
        }
        cur.close()
    return out


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("fast")
    # 3 hours (the last through the ingest path): 480 vectorised cycles in 5 chunks, 11 closed
    # workload intervals and 20 ended pods; a lost counter carry between chunks fails it. Six
    # hours took twice as long and checked nothing more (issue 39: the suite's time).
    real = build(HistorySize(nodes=6, days=0.125), tmp / "real.duckdb")
    mp = pytest.MonkeyPatch()
    mp.setattr(fast, "CHUNK_CYCLES", 100)  # several chunks: counters carried across them
    try:
        quick = build(HistorySize(nodes=6, days=0.125, tail_s=3600), tmp / "fast.duckdb")
    finally:
        mp.undo()
    assert quick.samples > 0 and real.samples > 0
    return _tables(real.path), _tables(quick.path)


@pytest.mark.parametrize("table", list(QUERIES))
def test_vectorised_span_equals_the_ingest_path(
    both: tuple[dict[str, Any], dict[str, Any]], table: str
) -> None:
    real, quick = both
    assert real[table], f"the small history has no {table} rows to compare"
    if table.startswith("samples_"):
        # a roll-up's sum is DuckDB's sum() of doubles, whose last bits depend on the rows'
        # physical order (and threads) on any store: every other column is equal exactly
        assert [r[:-2] + r[-1:] for r in quick[table]] == [r[:-2] + r[-1:] for r in real[table]]
        for q, r in zip(quick[table], real[table], strict=True):
            assert q[-2] == pytest.approx(r[-2], rel=1e-12, abs=1e-9), q
    else:
        assert quick[table] == real[table]


def test_the_small_history_has_what_the_comparison_needs(
    both: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """Pods come and go on the GPUs (intervals closed inside the vectorised span), IB
    counters increase, and the shared GPUs' fractions are written."""
    real, _ = both
    assert any(row[-1] is not None for row in real["intervals"])
    metrics = {row[0] for row in real["samples"] if row[-1]}
    assert {"gpuscope_ib_transmit_bytes_total", fast.WORKLOAD_UTIL} <= metrics


def test_an_unsupported_scenario_is_refused() -> None:
    from bench.history import scenario_cluster

    cluster, _ = scenario_cluster(6)
    cluster._removed["x"] = 1.0
    with pytest.raises(ValueError, match="removed pods"):
        fast.check_supported(cluster)
