"""bench/history.py: the benchmark history goes through the ingest path and the store's
own maintenance, and its size is chosen honestly."""

from pathlib import Path

import pytest

import bench.__main__ as bench_main
from bench.history import (
    DEFAULT,
    LARGE,
    QUICK,
    HistorySize,
    build,
    chosen_size,
    history,
    rows_between,
)
from gpuscope.collector.storage.store import Store


def test_sizes_default_quick_and_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUSCOPE_BENCH_HISTORY", raising=False)
    assert chosen_size(quick=True) == QUICK and chosen_size(quick=False) == DEFAULT
    monkeypatch.setenv("GPUSCOPE_BENCH_HISTORY", "large")
    assert chosen_size(quick=False) == LARGE and LARGE.gpus == 10_000 and LARGE.days == 7
    assert chosen_size(quick=True) == QUICK  # a smoke test stays small
    monkeypatch.setenv("GPUSCOPE_BENCH_HISTORY", "125x2")
    assert chosen_size(quick=False) == HistorySize(nodes=125, days=2.0)
    monkeypatch.setenv("GPUSCOPE_BENCH_HISTORY", "lots")
    with pytest.raises(ValueError, match="NODESxDAYS"):
        chosen_size(quick=False)
    assert DEFAULT.label() == "1 d of 104 GPUs at 15 s (analysed series)"
    assert QUICK.label() == "3 h of 48 GPUs at 15 s (analysed series)"


def test_large_and_quick_together_are_refused() -> None:
    assert bench_main.main(["--large", "--quick", "--only", "idle"]) == 2


def test_history_is_stored_by_the_ingest_path_and_rolled_up_by_maintenance(
    tmp_path: Path,
) -> None:
    size = HistorySize(nodes=6, days=0.5 / 24)  # 30 minutes: 120 cycles of 6 nodes
    h = build(size, tmp_path / "h.duckdb")
    assert h.cycles == 120 and h.samples > 0 and h.file_bytes > 0
    with Store.open(h.path, read_only=True) as store:
        # every sample came through append_cycle: the store's own count agrees
        assert store.samples_stored() == h.samples
        util = ("gpuscope_gpu_utilization_ratio",)
        assert rows_between(store, "samples", util, h.start, h.end) == 48 * 120
        # the 5-minute roll-ups are the store's own (apply_retention), one per GPU a bucket
        assert h.maintenance["rolled_5m"] > 0
        assert rows_between(store, "samples_5m", util, h.start, h.end) == 48 * 6
        cur = store.cursor()
        targets = cur.execute("SELECT count(DISTINCT target) FROM scrapes").fetchone()
        assert targets == (6,)  # one scrape target per node, as the agents are


def test_a_built_history_is_reused_from_the_cache_with_its_build_costs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSCOPE_BENCH_CACHE", str(tmp_path))
    size = HistorySize(nodes=6, days=0.25 / 24)
    first = history(size)
    assert first.path.name == "history.duckdb" and first.path.is_file()

    def no_rebuild(*args: object) -> None:
        raise AssertionError("rebuilt a cached history")

    monkeypatch.setattr("bench.history.build", no_rebuild)
    again = history(size)
    assert again == first  # the same file, and the ingest/maintenance times of its build
    assert not list(first.path.parent.glob("building-*"))
