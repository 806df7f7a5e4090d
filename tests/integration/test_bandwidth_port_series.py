"""A port whose counters come as more than one series (the same node, device and port
with another label apart): port_stats sums each series' steps by series first and then
adds the series of one port and metric up (issue 39: grouping every step by its labels
cost more), so the port is still one row whose ratio is over all its steps."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from gpuscope.analytics.detectors.bandwidth import run_bandwidth
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store
from tests.integration.test_bandwidth import (
    CFG,
    ERR,
    LINK,
    RATE,
    RX,
    STEP,
    T0,
    TX,
    TYPES,
    WAIT,
    at,
    lab,
    ms,
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "p.duckdb") as s:
        yield s


def _play(store: Store, shares: dict[str, float], until: float) -> None:
    """One port (n1, mlx5_0, 1) whose transmit counter comes as one series per
    ``shares`` key (a label `copy`), each growing at its share of the link rate."""
    counters = dict.fromkeys(shares, 1e12)
    port = lab(node="n1", device="mlx5_0", port="1")
    cycles: list[list[tuple[Batch, float]]] = []
    t = 0.0
    while t <= until:
        names = [RX, WAIT, LINK]
        labels = [port] * 3
        values = [1e12, 0.0, RATE]
        for copy, value in counters.items():
            names.append(TX)
            labels.append(lab(node="n1", device="mlx5_0", port="1", copy=copy))
            values.append(value)
        batch = Batch("n1", ms(T0 + timedelta(seconds=t)), names, labels, values, TYPES)
        cycles.append([(batch, 0.0)])
        for copy, share in shares.items():
            counters[copy] += share * RATE * STEP
        t += STEP
    store.append_cycles(cycles)


def test_two_series_of_one_port_are_one_port_over_all_their_steps(store: Store) -> None:
    _play(store, {"a": 0.9, "b": 0.3}, 600)
    result = run_bandwidth(store.cursor(), at(600), CFG)
    assert result.summary["ports"] == 1
    # (0.9 + 0.3) x rate x span over two spans: 0.6, under the hot ratio
    assert result.summary["max_port_ratio"] == pytest.approx(0.6, abs=1e-3)
    assert result.summary["hot_ports"] == 0


def test_one_series_a_port_reads_its_own_share(store: Store) -> None:
    _play(store, {"a": 0.95}, 600)
    result = run_bandwidth(store.cursor(), at(600), CFG)
    assert result.summary["ports"] == 1
    assert result.summary["max_port_ratio"] == pytest.approx(0.95, abs=1e-3)
    assert result.summary["hot_ports"] == 1


def test_an_error_type_as_two_series_adds_up_from_the_earlier_increase(store: Store) -> None:
    """port_errors sums per series first, then per port and type: two series of one
    error type (another label apart) add their increases, and the first increase is the
    earlier of theirs."""
    port = lab(node="n1", device="mlx5_0", port="1")
    cycles: list[list[tuple[Batch, float]]] = []
    t = 0.0
    while t <= 600:
        a = 3.0 if t >= 420 else 1.0  # series a: +2 at 420 s
        b = 10.0 if t >= 360 else 5.0  # series b: +5 at 360 s
        names = [RX, TX, WAIT, LINK, ERR, ERR]
        labels = [port] * 4 + [
            lab(node="n1", device="mlx5_0", port="1", type="symbol_error", copy=c)
            for c in ("a", "b")
        ]
        values = [1e12, 1e12, 0.0, RATE, a, b]
        batch = Batch("n1", ms(T0 + timedelta(seconds=t)), names, labels, values, TYPES)
        cycles.append([(batch, 0.0)])
        t += STEP
    store.append_cycles(cycles)
    result = run_bandwidth(store.cursor(), at(600), CFG)
    [f] = [f for f in result.findings if f.kind == "link_errors"]
    assert f.evidence["increase_by_type"] == {"symbol_error": 7}
    assert f.since == at(360)
