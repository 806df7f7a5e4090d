"""The IB port detector reading fleet summaries' rows (issue 40): a hot port's bucket
increases (transmit/receive bytes, transmit wait) stored as gauges under the counters'
names, with its line rate, only in the buckets either direction was over the floor, each
at its bucket's last second (what ``collector.query.summaries`` stores). Its first stored
bucket counts as that bucket (detectors/sample_steps.py), so a port hot for the window is
found even when the bucket before it was cool, as direct scraping finds it; a gap of
unstored buckets lowers the rate, never raises it. Counter series (direct scraping) keep
their rule: the first sample read starts the series."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuscope.analytics.detectors.bandwidth import run_bandwidth
from gpuscope.analytics.detectors.bandwidth_history import bandwidth_history
from gpuscope.collector.querying.fleet_summaries import GAUGE_TYPES
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store
from tests.integration.test_bandwidth import (
    CFG,
    LINK,
    RATE,
    RX,
    TX,
    TYPES,
    WAIT,
    Node,
    at,
    lab,
    ms,
)

BUCKET = 300


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "s.duckdb") as s:
        yield s


def _port(device: str) -> tuple[tuple[str, str], ...]:
    return lab(node="n1", device=device, port="1")


def _store_buckets(store: Store, shares: dict[str, dict[int, float]]) -> None:
    """Per device, per bucket index ``k`` (the bucket ``[300k, 300k + 300)``), its port's
    transmit share of the line rate in that bucket, stored as fleet summaries store a hot
    port: the bucket's increases (receive at half, no wait) at its last second, gauges,
    with the line rate."""
    by_ts: dict[int, Batch] = {}
    types = dict(GAUGE_TYPES) | {LINK: "gauge"}
    for device, buckets in shares.items():
        for k, share in buckets.items():
            t = ms(at(k * BUCKET + BUCKET - 1))
            b = by_ts.setdefault(t, Batch("fleet", t, [], [], [], types))
            inc = share * RATE * BUCKET
            b.names.extend([TX, RX, WAIT, LINK])
            b.labels.extend([_port(device)] * 4)
            b.values.extend([inc, inc / 2, 0.0, RATE])
    for t in sorted(by_ts):
        store.append_scrape(by_ts[t])


def _kinds(store: Store) -> set[str]:
    rows = store.cursor().execute(
        "SELECT DISTINCT kind FROM series WHERE metric IN (?, ?)", [TX, RX]
    )
    return {str(k) for (k,) in rows.fetchall()}


def test_summaries_port_types_are_gauges(store: Store) -> None:
    _store_buckets(store, {"mlx5_0": {3: 0.9}})
    assert _kinds(store) == {"gauge"}


def test_a_port_hot_in_its_first_stored_bucket_is_found_as_directly(
    store: Store, tmp_path: Path
) -> None:
    """mlx5_0 over the floor only in the window's bucket (the bucket before was cool, so
    nothing was stored): found, at its ratio, as direct scraping of the same traffic finds
    it. mlx5_1 at 0.6 (over the floor, under the hot line) for two buckets: not hot."""
    _store_buckets(store, {"mlx5_0": {3: 0.9}, "mlx5_1": {2: 0.6, 3: 0.6}})
    result = run_bandwidth(store.cursor(), at(4 * BUCKET), CFG)
    [f] = result.findings
    assert (f.kind, f.subject) == (
        "bandwidth_hotspot",
        {"node": "n1", "device": "mlx5_0", "port": "1"},
    )
    assert f.evidence["ratio"] == pytest.approx(0.9, abs=1e-3)
    assert f.evidence["direction"] == "transmit"
    assert f.evidence["share_of_window_hot"] == 1.0
    assert f.evidence["transmit_bytes_per_second"] == pytest.approx(0.9 * RATE, rel=1e-3)
    assert result.summary["ports"] == 2
    assert result.summary["max_port_ratio"] == pytest.approx(0.9, abs=1e-3)

    with Store.open(tmp_path / "direct.duckdb") as direct:
        Node(direct, "n1", {"mlx5_0": lambda t: 0.9 if t >= 900 else 0.0}).play(1200)
        [d] = run_bandwidth(direct.cursor(), at(4 * BUCKET), CFG).findings
    assert (d.kind, d.subject) == (f.kind, f.subject)
    assert d.evidence["ratio"] == pytest.approx(f.evidence["ratio"], abs=1e-3)


def test_history_finds_the_first_stored_bucket_too(store: Store) -> None:
    """bandwidth_history (port_history) judges each window as run_bandwidth does."""
    _store_buckets(store, {"mlx5_0": {3: 0.9}, "mlx5_1": {2: 0.6, 3: 0.6}})
    history = bandwidth_history(store.cursor(), at(0), at(6 * BUCKET), CFG)
    hot = [(e, [p.device for p in ports]) for e, ports in history if ports]
    assert hot == [(at(4 * BUCKET), ["mlx5_0"])]
    unfiltered = bandwidth_history(store.cursor(), at(0), at(6 * BUCKET), CFG, prefilter=False)
    assert unfiltered == history


def test_consecutive_hot_buckets_give_the_ports_rate(store: Store) -> None:
    _store_buckets(store, {"mlx5_0": {k: 0.85 for k in range(6)}})
    cfg = CFG.model_copy(update={"ib_hot_window_minutes": 15})
    [f] = run_bandwidth(store.cursor(), at(6 * BUCKET), cfg).findings
    assert f.evidence["ratio"] == pytest.approx(0.85, abs=1e-3)


def test_a_gap_of_cool_buckets_lowers_the_rate(store: Store) -> None:
    """Hot in the first and third buckets of a 15-minute window, cool (unstored) between:
    the third bucket's increase is read over the 600 s since the first, never as hot."""
    _store_buckets(store, {"mlx5_0": {3: 0.9, 5: 0.9}})
    cfg = CFG.model_copy(update={"ib_hot_window_minutes": 15})
    result = run_bandwidth(store.cursor(), at(6 * BUCKET), cfg)
    assert result.findings == []
    assert result.summary["max_port_ratio"] == pytest.approx(0.9 * 2 / 3, abs=1e-3)
    history = bandwidth_history(store.cursor(), at(0), at(9 * BUCKET), cfg, prefilter=False)
    assert all(not ports for _e, ports in history)


def test_a_counter_ports_first_sample_still_starts_its_series(store: Store) -> None:
    """Direct scraping unchanged: raw counters scraped at the buckets' last seconds, first
    in the window's bucket, give no step there (the first sample has nothing before it),
    so the port is not judged; scraped from the bucket before, the step is its rate."""

    def scrape(t: int, total: float) -> None:
        port = _port("mlx5_0")
        store.append_scrape(
            Batch("n1", ms(at(t)), [TX, RX, LINK], [port] * 3, [total, total / 2, RATE], TYPES)
        )

    scrape(1199, 1e12)
    assert _kinds(store) == {"counter"}
    result = run_bandwidth(store.cursor(), at(4 * BUCKET), CFG)
    assert result.findings == [] and result.summary["max_port_ratio"] == 0.0
    scrape(1499, 1e12 + 0.9 * RATE * BUCKET)
    [f] = run_bandwidth(store.cursor(), at(5 * BUCKET), CFG).findings
    assert f.evidence["ratio"] == pytest.approx(0.9, abs=1e-3)
