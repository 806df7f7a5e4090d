"""IB hot spots, link errors and rail imbalance (analytics.bandwidth) on a real store.

Ports are played at known shares of their link rate and scraped every 15 s through the
collector's write path (Store.append_scrape turns the raw counters into increases), so each
answer is known by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analytics.bandwidth import run_bandwidth
from analytics.base import Analysis
from collector.batch import Batch
from collector.store import Store
from gpuscope.settings import AnalyticsSettings

T0 = datetime(2025, 3, 3, 10, 0, 0)
RATE = 50e9  # 400 Gb/s in bytes/s
STEP = 15
CFG = AnalyticsSettings()  # hot: over 0.8 for 5 minutes
TX, RX = "gpuscope_ib_transmit_bytes_total", "gpuscope_ib_receive_bytes_total"
WAIT, ERR = "gpuscope_ib_transmit_wait_total", "gpuscope_ib_errors_total"
LINK = "gpuscope_ib_port_rate_bytes_per_second"
INFO = "gpuscope_gpu_workload_info"
TYPES = {TX[:-6]: "counter", RX[:-6]: "counter", WAIT[:-6]: "counter", ERR[:-6]: "counter"}
TYPES |= {LINK: "gauge", INFO: "gauge"}

#: seconds since T0 -> share of link rate
Profile = Callable[[float], float]


def ms(t: datetime) -> int:
    return int(t.replace(tzinfo=UTC).timestamp() * 1000)


def lab(**kw: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kw.items()))


class Node:
    """A node's IB ports: raw counters that grow at each port's profile, and error counts."""

    def __init__(self, store: Store, name: str, profiles: dict[str, Profile]) -> None:
        self.store, self.name, self.profiles = store, name, profiles
        self.tx = dict.fromkeys(profiles, 1e12)  # counters already far from 0
        self.wait = dict.fromkeys(profiles, 0.0)
        self.errors: dict[tuple[str, str], float] = {}
        self.workloads: list[tuple[str, str]] = []  # (pod, gpu)

    def scrape(self, t: float) -> None:
        names: list[str] = []
        labels: list[tuple[tuple[str, str], ...]] = []
        values: list[float] = []
        for dev in self.profiles:
            port = lab(node=self.name, device=dev, port="1")
            names += [TX, RX, WAIT, LINK]
            labels += [port] * 4
            values += [self.tx[dev], self.tx[dev] * 0.5, self.wait[dev], RATE]
            for (d, type_), n in self.errors.items():
                if d == dev:
                    names.append(ERR)
                    labels.append(lab(node=self.name, device=dev, port="1", type=type_))
                    values.append(n)
        for pod, gpu in self.workloads:
            names.append(INFO)
            labels.append(lab(node=self.name, gpu=gpu, uuid=f"GPU-{self.name}-{gpu}",
                              namespace="ml", pod=pod, container="main", project="vision",
                              workload_kind="training"))  # fmt: skip
            values.append(1.0)
        at = T0 + timedelta(seconds=t)
        self.store.append_scrape(Batch(self.name, ms(at), names, labels, values, TYPES))

    def advance(self, t: float) -> None:
        """Counters over (t, t + STEP] at each profile's share of the link rate."""
        for dev, profile in self.profiles.items():
            share = profile(t + STEP / 2)
            self.tx[dev] += share * RATE * STEP
            self.wait[dev] += max(0.0, share - 0.9) * 1e6 * STEP

    def play(self, until: float, start: float = 0.0) -> None:
        t = start
        while t <= until:
            self.scrape(t)
            self.advance(t)
            t += STEP


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "b.duckdb") as s:
        yield s


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def const(share: float) -> Profile:
    return lambda _t: share


def kinds(result: Analysis) -> list[tuple[str, str]]:
    return sorted((f.kind, f.subject.get("device", "")) for f in result.findings)


def test_port_at_97_percent_for_10_minutes_is_a_hotspot_with_its_workload(store: Store) -> None:
    node = Node(
        store, "n1", {"mlx5_0": const(0.97)} | {f"mlx5_{i}": const(0.05) for i in (1, 2, 3)}
    )
    node.workloads = [("train-0", "0"), ("train-0", "1")]
    node.play(600)
    result = run_bandwidth(store.cursor(), at(600), CFG)
    hot = [f for f in result.findings if f.kind == "bandwidth_hotspot"]
    [f] = hot
    assert f.subject == {"node": "n1", "device": "mlx5_0", "port": "1"}
    assert f.evidence["ratio"] == pytest.approx(0.97, abs=1e-3)
    assert f.evidence["direction"] == "transmit"
    assert f.evidence["share_of_window_hot"] == 1.0
    assert f.evidence["transmit_wait_per_second"] == pytest.approx(0.07 * 1e6, rel=1e-3)
    assert f.evidence["workloads"] == [
        {"namespace": "ml", "pod": "train-0", "project": "vision", "kind": "training",
         "gpus": ["0", "1"]}
    ]  # fmt: skip
    assert f.since == at(300)
    # one rail hot, its peers at 5 %: rail imbalance on the node
    [imb] = [f for f in result.findings if f.kind == "rail_imbalance"]
    assert imb.subject == {"node": "n1"}
    assert [p["device"] for p in imb.evidence["hot_ports"]] == ["mlx5_0"]
    assert len(imb.evidence["idle_ports"]) == 3
    s = result.summary
    assert (s["ports"], s["hot_ports"], s["ports_with_errors"]) == (4, 1, 0)
    assert s["max_port_ratio"] == pytest.approx(0.97, abs=1e-3)
    assert s["nodes"]["n1"]["node_hot_ports"] == 1
    assert s["ports_congested"] == 1


def test_97_percent_for_3_minutes_is_not_sustained(store: Store) -> None:
    """Busy for the last 3 minutes of the window only: average 0.6, hot 60 % of the time."""
    node = Node(store, "n1", {"mlx5_0": lambda t: 0.97 if t >= 420 else 0.1})
    node.play(600)
    result = run_bandwidth(store.cursor(), at(600), CFG)
    assert result.findings == []
    assert result.summary["hot_ports"] == 0
    assert 0.5 < result.summary["max_port_ratio"] < 0.7


def test_a_port_seen_for_3_minutes_only_is_not_sustained(store: Store) -> None:
    node = Node(store, "n1", {"mlx5_0": const(0.97)})
    node.play(600, start=420)
    assert run_bandwidth(store.cursor(), at(600), CFG).findings == []


def test_hot_ends_when_load_stops_and_past_windows_rerun(store: Store) -> None:
    node = Node(store, "n1", {"mlx5_0": lambda t: 0.97 if t < 600 else 0.1})
    node.play(1200)
    assert kinds(run_bandwidth(store.cursor(), at(600), CFG)) == [("bandwidth_hotspot", "mlx5_0")]
    assert run_bandwidth(store.cursor(), at(1200), CFG).findings == []
    assert run_bandwidth(store.cursor(), at(240), CFG).findings == []  # window not covered


def test_counter_reset_is_not_a_spike(store: Store) -> None:
    """The agent restarts mid-window and its counters count up from 0 again: the store keeps
    the new value as that step's increase, a dip rather than a spike."""
    node = Node(store, "n1", {"mlx5_0": const(0.5), "mlx5_1": const(0.97)})
    node.play(450)
    node.tx = dict.fromkeys(node.tx, 0.0)  # reset
    node.play(600, start=465)
    result = run_bandwidth(store.cursor(), at(600), CFG)
    assert kinds(result) == [("bandwidth_hotspot", "mlx5_1")]  # one dip does not hide it
    assert result.summary["nodes"]["n1"]["node_max_port_ratio"] < 0.98
    cur = store.cursor()
    peak = cur.execute(
        "SELECT max(s.value) FROM samples s JOIN series r USING (series_id) "
        "WHERE r.metric = ? AND r.device = 'mlx5_0'",
        [TX],
    ).fetchone()
    assert peak is not None and peak[0] <= 0.5 * RATE * STEP + 1


def test_error_counters_that_increase_are_link_errors(store: Store) -> None:
    node = Node(store, "n1", {"mlx5_0": const(0.1), "mlx5_1": const(0.1), "mlx5_2": const(0.1)})
    node.errors = {("mlx5_0", "symbol_error"): 5.0, ("mlx5_1", "link_downed"): 1.0}
    node.errors |= {("mlx5_2", "port_xmit_discards"): 100.0}
    node.play(300)  # constant, non-zero counts: old errors, no finding
    assert run_bandwidth(store.cursor(), at(300), CFG).findings == []
    node.errors[("mlx5_0", "symbol_error")] = 12.0
    node.errors[("mlx5_1", "link_downed")] = 2.0
    node.errors[("mlx5_2", "port_xmit_discards")] = 130.0
    node.play(600, start=315)
    result = run_bandwidth(store.cursor(), at(600), CFG)
    found = {f.subject["device"]: f for f in result.findings}
    assert [f.kind for f in found.values()] == ["link_errors"] * 3
    assert found["mlx5_0"].severity == "warning"
    assert found["mlx5_0"].evidence["increase_by_type"] == {"symbol_error": 7}
    assert found["mlx5_0"].since == at(315)
    assert found["mlx5_1"].severity == "critical"
    assert found["mlx5_2"].severity == "info"
    assert result.summary["ports_with_errors"] == 3
    # the increase falls out of the window again
    node.play(1200, start=615)
    assert run_bandwidth(store.cursor(), at(1200), CFG).findings == []


def test_all_rails_hot_is_no_imbalance(store: Store) -> None:
    node = Node(store, "n1", {f"mlx5_{i}": const(0.9) for i in range(4)})
    node.play(600)
    result = run_bandwidth(store.cursor(), at(600), CFG)
    assert [f.kind for f in result.findings] == ["bandwidth_hotspot"] * 4


def test_hot_rail_beside_a_busy_peer_is_no_imbalance(store: Store) -> None:
    node = Node(store, "n1", {"mlx5_0": const(0.95), "mlx5_1": const(0.6)})
    node.play(600)
    assert kinds(run_bandwidth(store.cursor(), at(600), CFG)) == [("bandwidth_hotspot", "mlx5_0")]


def test_thresholds_come_from_settings(store: Store) -> None:
    node = Node(store, "n1", {"mlx5_0": const(0.7)})
    node.play(900)
    assert run_bandwidth(store.cursor(), at(900), CFG).findings == []
    looser = AnalyticsSettings(ib_hot_ratio=0.6, ib_hot_window_minutes=10)
    assert kinds(run_bandwidth(store.cursor(), at(900), looser)) == [
        ("bandwidth_hotspot", "mlx5_0")
    ]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shares=st.lists(st.floats(0.0, 1.0), min_size=24, max_size=24))
def test_ratio_is_the_time_weighted_mean_and_hot_needs_it(shares: list[float]) -> None:
    """Property: for any load over the window the reported ratio is the mean of the step
    shares, and a port is hot only if that mean and 80 % of the steps are over 0.8."""
    with Store.open(":memory:") as s:
        node = Node(s, "n1", {"mlx5_0": lambda t: shares[min(int(t // STEP) - 16, 23)]
                              if t >= 240 else 0.0})  # fmt: skip
        node.play(600)
        result = run_bandwidth(s.cursor(), at(600), CFG)
    window = shares[4:24]  # the 20 steps ending in (300, 600]
    mean = sum(window) / len(window)
    assert result.summary["max_port_ratio"] == pytest.approx(mean, abs=1e-3)
    expect_hot = mean >= 0.8 and sum(x >= 0.8 for x in window) >= 16
    if abs(mean - 0.8) > 1e-6 and all(abs(x - 0.8) > 1e-6 for x in window):
        assert (result.summary["hot_ports"] == 1) == expect_hot
