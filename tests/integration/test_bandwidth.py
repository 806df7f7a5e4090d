"""IB hot spots, link errors and rail imbalance (gpuscope.analytics.detectors.bandwidth) on a real store.

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

from gpuscope.analytics.base import Analysis
from gpuscope.analytics.detectors.bandwidth import run_bandwidth
from gpuscope.analytics.detectors.bandwidth_history import HotPort, bandwidth_history
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import AnalyticsSettings

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
        self.step: float = STEP
        self.link_rate: Profile = const(RATE)  # the link-rate gauge over time
        self.played: list[list[tuple[Batch, float]]] | None = None  # scrapes held by play

    def scrape(self, t: float) -> None:
        names: list[str] = []
        labels: list[tuple[tuple[str, str], ...]] = []
        values: list[float] = []
        for dev in self.profiles:
            port = lab(node=self.name, device=dev, port="1")
            names += [TX, RX, WAIT, LINK]
            labels += [port] * 4
            values += [self.tx[dev], self.tx[dev] * 0.5, self.wait[dev], self.link_rate(t)]
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
        batch = Batch(self.name, ms(at), names, labels, values, TYPES)
        if self.played is None:
            self.store.append_scrape(batch)
        else:
            self.played.append([(batch, 0.0)])

    def advance(self, t: float) -> None:
        """Counters over (t, t + step] at each profile's share of the link rate."""
        for dev, profile in self.profiles.items():
            share = profile(t + self.step / 2)
            self.tx[dev] += share * RATE * self.step
            self.wait[dev] += max(0.0, share - 0.9) * 1e6 * self.step

    def play(self, until: float, start: float = 0.0) -> None:
        """Scrapes every ``step`` from ``start`` to ``until``, stored as one run of cycles
        (``Store.append_cycles``, held equal to a scrape at a time by test_store_bulk)."""
        t, self.played = start, []
        while t <= until:
            self.scrape(t)
            self.advance(t)
            t += self.step
        played, self.played = self.played, None
        self.store.append_cycles(played)


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


# -- NVLink and PCIe ------------------------------------------------------------------------

NVLINK, PCIE = "gpuscope_gpu_nvlink_bytes_total", "gpuscope_gpu_pcie_bytes_total"
GPU_INFO = "gpuscope_gpu_info"
GPU_TYPES = {NVLINK[:-6]: "counter", PCIE[:-6]: "counter", GPU_INFO: "gauge", INFO: "gauge"}
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"


class GpuNode:
    """A node's GPUs: NVLink and PCIe counters (tx at the profile's share of capacity, rx at
    half of it), the GPU identity series and the pods holding the GPUs."""

    def __init__(
        self, store: Store, name: str, model: str, nvlink: dict[str, Profile],
        pcie: dict[str, Profile], capacity: tuple[float, float],
    ) -> None:  # fmt: skip
        self.store, self.name, self.model = store, name, model
        self.links = {(NVLINK, g): p for g, p in nvlink.items()}
        self.links |= {(PCIE, g): p for g, p in pcie.items()}
        self.capacity = {NVLINK: capacity[0], PCIE: capacity[1]}
        self.total = dict.fromkeys(self.links, 1e12)
        self.workloads: list[tuple[str, str]] = []  # (pod, gpu)
        self.played: list[list[tuple[Batch, float]]] = []  # scrapes held by play

    def gpu(self, gpu: str) -> dict[str, str]:
        return {"node": self.name, "gpu": gpu, "uuid": f"GPU-{self.name}-{gpu}", "mig_instance": ""}

    def scrape(self, t: float) -> None:
        names: list[str] = []
        labels: list[tuple[tuple[str, str], ...]] = []
        values: list[float] = []
        for gpu in sorted({g for _m, g in self.links}):
            names.append(GPU_INFO)
            labels.append(lab(**self.gpu(gpu), model=self.model))
            values.append(1.0)
        for (metric, gpu), total in self.total.items():
            names += [metric, metric]
            labels += [lab(**self.gpu(gpu), direction="tx"), lab(**self.gpu(gpu), direction="rx")]
            values += [total, total / 2]
        for pod, gpu in self.workloads:
            names.append(INFO)
            labels.append(lab(**self.gpu(gpu), namespace="ml", pod=pod, container="main",
                              project="vision", workload_kind="training"))  # fmt: skip
            values.append(1.0)
        self.played.append([(Batch(self.name, ms(at(t)), names, labels, values, GPU_TYPES), 0.0)])

    def play(self, until: float) -> None:
        """Scrapes every ``STEP`` from 0 to ``until``, stored as one run of cycles
        (``Store.append_cycles``, held equal to a scrape at a time by test_store_bulk)."""
        t = 0.0
        while t <= until:
            self.scrape(t)
            for key, profile in self.links.items():
                self.total[key] += profile(t + STEP / 2) * self.capacity[key[0]] * STEP
            t += STEP
        played, self.played = self.played, []
        self.store.append_cycles(played)


def test_nvlink_at_90_percent_is_a_hotspot_and_50_percent_is_not(store: Store) -> None:
    node = GpuNode(store, "g1", H100, {"0": const(0.9), "1": const(0.5)}, {}, (450e9, 64e9))
    node.workloads = [("tp-0", "0"), ("tp-0", "1")]
    node.play(600)
    result = run_bandwidth(store.cursor(), at(600), CFG)
    [f] = result.findings
    assert f.kind == "nvlink_hotspot" and f.severity == "warning"
    assert f.subject == {"node": "g1", "gpu": "0", "uuid": "GPU-g1-0"}
    assert f.evidence["ratio"] == pytest.approx(0.9, abs=1e-3)
    assert f.evidence["bytes_per_second"] == pytest.approx(0.9 * 450e9, rel=1e-3)
    assert f.evidence["direction"] == "tx"
    assert f.evidence["capacity_bytes_per_second"] == 450e9
    assert f.evidence["share_of_window_hot"] == 1.0
    assert f.evidence["window_minutes"] == 5
    assert f.evidence["workloads"] == [
        {"namespace": "ml", "pod": "tp-0", "project": "vision", "kind": "training"}
    ]
    assert f.since == at(300)
    s = result.summary
    assert (s["nvlink_gpus"], s["nvlink_hot_gpus"], s["pcie_hot_gpus"]) == (2, 1, 0)
    assert s["max_nvlink_ratio"] == pytest.approx(0.9, abs=1e-3)


def test_pcie_at_90_percent_is_a_hotspot_and_50_percent_is_not(store: Store) -> None:
    """A100: PCIe Gen4 x16, 32 GB/s per direction by default."""
    pcie = {"0": const(0.9), "1": const(0.5)}
    GpuNode(store, "a1", A100, {"0": const(0.1)}, pcie, (300e9, 32e9)).play(600)
    result = run_bandwidth(store.cursor(), at(600), CFG)
    [f] = result.findings
    assert (f.kind, f.subject["gpu"]) == ("pcie_hotspot", "0")
    assert f.evidence["bytes_per_second"] == pytest.approx(0.9 * 32e9, rel=1e-3)
    assert f.evidence["ratio"] == pytest.approx(0.9, abs=1e-3)
    assert f.evidence["capacity_bytes_per_second"] == 32e9
    assert result.summary["max_pcie_ratio"] == pytest.approx(0.9, abs=1e-3)


def test_gpu_link_capacity_and_ratio_come_from_settings(store: Store) -> None:
    """At 90 % of 450 GB/s an H100 is hot; with a 1 TB/s capacity set it is at 40 %; an
    unknown model has no capacity, so no ratio and no finding."""
    GpuNode(store, "g1", H100, {"0": const(0.9)}, {}, (450e9, 64e9)).play(600)
    GpuNode(store, "x1", "Mystery GPU", {"0": const(1.0)}, {}, (450e9, 64e9)).play(600)
    assert [f.subject["node"] for f in run_bandwidth(store.cursor(), at(600), CFG).findings] == [
        "g1"
    ]
    bigger = AnalyticsSettings(nvlink_bytes_per_second={"H100": 1e12})
    assert run_bandwidth(store.cursor(), at(600), bigger).findings == []
    looser = AnalyticsSettings(gpu_link_hot_ratio=0.95)
    assert run_bandwidth(store.cursor(), at(600), looser).findings == []


# -- rail imbalance per job ---------------------------------------------------------------


def test_a_4_node_job_with_one_hot_rail_is_a_job_rail_imbalance(store: Store) -> None:
    """Job llm: llm-worker-0..3, one per node, each on GPUs 0 and 1 (rails mlx5_0/1). Only
    n0's mlx5_0 carries traffic: the job's 7 other rails idle. The nodes also have rails
    the job does not use (mlx5_2, 3) busy at 50 %: they are no business of the job's."""
    for i in range(4):
        hot = const(0.95) if i == 0 else const(0.05)
        profiles = {"mlx5_0": hot, "mlx5_1": const(0.05)}
        profiles |= {"mlx5_2": const(0.5), "mlx5_3": const(0.5)}
        node = Node(store, f"n{i}", profiles)
        node.workloads = [(f"llm-worker-{i}", "0"), (f"llm-worker-{i}", "1")]
        node.play(600)
    result = run_bandwidth(store.cursor(), at(600), CFG)
    [job] = [f for f in result.findings if f.subject.get("job")]
    assert job.kind == "rail_imbalance"
    assert job.subject == {"namespace": "ml", "job": "llm"}
    assert [(r["node"], r["device"]) for r in job.evidence["hot_rails"]] == [("n0", "mlx5_0")]
    assert job.evidence["hot_rails"][0]["pods"] == ["llm-worker-0"]
    assert len(job.evidence["idle_rails"]) == 7
    assert job.evidence["nodes"] == ["n0", "n1", "n2", "n3"]
    assert result.summary["imbalanced_jobs"] == 1
    # n0 itself has busy peers (mlx5_2, 3 at 50 %): no node-level imbalance
    assert [f.kind for f in result.findings] == ["bandwidth_hotspot", "rail_imbalance"]


def test_a_job_whose_rails_all_carry_traffic_is_balanced(store: Store) -> None:
    for i in range(4):
        node = Node(store, f"n{i}", {"mlx5_0": const(0.95 if i == 0 else 0.5)})
        node.workloads = [(f"llm-{i}", "0")]
        node.play(600)
    result = run_bandwidth(store.cursor(), at(600), CFG)
    assert [f.kind for f in result.findings] == ["bandwidth_hotspot"]


# -- history --------------------------------------------------------------------------------


def test_history_over_a_day_with_a_hot_hour_gives_exactly_its_windows(store: Store) -> None:
    """60 s scrapes for a day; mlx5_0 at 97 % from 4 h to 5 h (steps starting in the hour),
    else 10 %. The 5-minute windows ending 4:05 .. 5:00 hold only hot steps: those 12."""
    node = Node(store, "n1", {"mlx5_0": lambda t: 0.97 if 4 * 3600 <= t < 5 * 3600 else 0.1})
    node.step = 60
    node.play(86400)
    history = bandwidth_history(store.cursor(), at(0), at(86400), CFG)
    assert len(history) == 288
    assert [e for e, _ in history][:2] == [at(300), at(600)]
    hot = [(e, ports) for e, ports in history if ports]
    assert [e for e, _ in hot] == [at(4 * 3600 + 300 * k) for k in range(1, 13)]
    for _, ports in hot:
        [p] = ports
        assert p == HotPort("n1", "mlx5_0", "1", p.ratio, "transmit")
        assert p.ratio == pytest.approx(0.97, abs=1e-3)
    # the same windows as a run per window
    cur = store.cursor()
    for e, ports in history[40:70]:
        run = run_bandwidth(cur, e, CFG)
        assert [f.subject["device"] for f in run.findings if f.kind == "bandwidth_hotspot"] == [
            p.device for p in ports
        ]


def test_history_with_a_window_longer_than_the_step_matches_single_runs(store: Store) -> None:
    """10-minute windows every 5 minutes: each step counts in two windows."""
    shares = [0.95, 0.95, 0.5, 0.95, 0.95, 0.95, 0.95, 0.95, 0.2, 0.95, 0.95, 0.95, 0.95]
    node = Node(store, "n1", {"mlx5_0": lambda t: shares[min(int(t // 300), 12)],
                              "mlx5_1": const(0.85)})  # fmt: skip
    node.play(3900)
    cfg = AnalyticsSettings(ib_hot_window_minutes=10)
    history = bandwidth_history(store.cursor(), at(0), at(3900), cfg)
    assert len(history) == 13
    cur = store.cursor()
    for e, ports in history:
        run = run_bandwidth(cur, e, cfg)
        expect = [(f.subject["device"], f.evidence["ratio"]) for f in run.findings
                  if f.kind == "bandwidth_hotspot"]  # fmt: skip
        assert [(p.device, round(p.ratio, 4)) for p in ports] == expect, e
    assert sum(bool(p) for _, p in history) >= 5


def test_history_follows_a_link_rate_that_changes(store: Store) -> None:
    """The link trains down to half its rate at 30 minutes while the traffic stays at
    45 % of the old rate: 90 % of the new one, hot from then on, in history as in runs
    (the rate series is not constant over the range, so each window takes its own)."""
    node = Node(store, "n1", {"mlx5_0": const(0.45)})
    node.link_rate = lambda t: RATE if t < 1800 else RATE / 2
    node.play(3600)
    history = bandwidth_history(store.cursor(), at(0), at(3600), CFG)
    cur = store.cursor()
    for e, ports in history:
        run = run_bandwidth(cur, e, CFG)
        expect = [f.subject["device"] for f in run.findings if f.kind == "bandwidth_hotspot"]
        assert [p.device for p in ports] == expect, e
    # the window ending at 30 minutes already ends with the new rate: it judges by its last
    assert [e for e, p in history if p] == [at(1800 + 300 * k) for k in range(7)]


def test_peak_never_reads_over_the_line_rate_with_whole_second_timestamps(store: Store) -> None:
    """Regression (issue 12): a hot-spot evidence peak of 1.18 x line rate. Scraped once a
    second with the scrape's true time anywhere in its second (the store keeps whole
    seconds), a port at 97 % showed single steps of up to 1.9 s of traffic "in 1 s". The
    peak is judged over spans of at least 10 s and capped at the line rate."""
    node = Node(store, "n1", {"mlx5_0": const(0.97)})
    times = [k + (0.9 if k % 7 == 3 else 0.05 * (k % 5)) for k in range(301)]
    for t, nxt in zip(times, [*times[1:], times[-1] + 1], strict=True):
        node.step = nxt - t
        node.scrape(t)
        node.advance(t)
    result = run_bandwidth(store.cursor(), at(300), CFG)
    [f] = [f for f in result.findings if f.kind == "bandwidth_hotspot"]
    assert 0.9 <= f.evidence["peak_ratio"] <= 1.0
    assert f.evidence["ratio"] == pytest.approx(0.97, abs=0.01)


@pytest.mark.parametrize("window_minutes", [5, 10])
def test_history_in_chunks_equals_one_query(store: Store, window_minutes: int) -> None:
    """bandwidth_history reads a range CHUNK_WINDOWS windows at a time (memory bounded by
    the chunk at 10,000 GPUs x 7 days); chunks of 7 windows, with a link rate that changes
    inside one chunk and a hot spell across a chunk's edge, give exactly the one-query
    answer."""
    node = Node(
        store, "n1",
        {"mlx5_0": lambda t: 0.97 if 1500 <= t < 4200 else 0.1, "mlx5_1": const(0.85)},
    )  # fmt: skip
    node.link_rate = lambda t: RATE if t < 2400 else RATE / 2
    node.play(3 * 3600)
    cfg = AnalyticsSettings(ib_hot_window_minutes=window_minutes)
    cur = store.cursor()
    whole = bandwidth_history(cur, at(0), at(3 * 3600), cfg, chunk_windows=10**6)
    chunked = bandwidth_history(cur, at(0), at(3 * 3600), cfg, chunk_windows=7)
    assert len(whole) == 36 and sum(bool(p) for _, p in whole) >= 10
    assert chunked == whole
