"""bandwidth_history's roll-up bound (``port_candidates``) never leaves out a hot window.

The full re-analysis reads raw steps only for the ports whose 5-minute roll-ups (raw
samples past the roll-up frontier) could put them over the hot line in a window. These
tests hold the answer with the bound equal to the answer without it (every port read),
on stores whose history is partly rolled up by the store's own maintenance, with ports
just under and just over the line, a link rate that changes, and random profiles.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscope.analytics.detectors.bandwidth_history import bandwidth_history, candidate_links
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import AnalyticsSettings
from tests.integration.test_bandwidth import CFG, RATE, Node, Profile, at, const


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "p.duckdb") as s:
        yield s


def both(store: Store, seconds: float, cfg: AnalyticsSettings = CFG) -> tuple[list, list]:  # type: ignore[type-arg]
    cur = store.cursor()
    bounded = bandwidth_history(cur, at(0), at(seconds), cfg, chunk_windows=5)
    every = bandwidth_history(cur, at(0), at(seconds), cfg, chunk_windows=5, prefilter=False)
    return bounded, every


def test_rolled_up_history_with_ports_either_side_of_the_line_gives_the_same_windows(
    store: Store,
) -> None:
    """Five ports from 30 % to 97 % of the line, a hot spell, and a link that trains down
    to half its rate: the first 90 minutes rolled up by the store's own maintenance, the
    last 30 raw. The bound reads only some ports and finds every hot window."""
    profiles = {
        "mlx5_0": const(0.30),
        "mlx5_1": const(0.79),  # under the line: never hot
        "mlx5_2": const(0.81),  # over it: hot in every covered window
        "mlx5_3": lambda t: 0.97 if 1800 <= t < 4500 else 0.05,
        "mlx5_5": lambda t: 0.97 if (t // 60) % 2 else 0.2,  # hot half the time: not sustained
    }
    node = Node(store, "n1", profiles)
    node.play(7200)
    # a second node whose link trains down to half its rate at 45 minutes: its 45 % is
    # 90 % of the new rate (a varying rate bounds nothing: the port is read in full)
    other = Node(store, "n2", {"mlx5_0": const(0.45)})
    other.link_rate = lambda t: RATE if t < 2700 else RATE / 2
    other.play(7200)
    store.apply_retention(at(5400) + store.retention.rollup_delay)
    rolled = store.cursor().execute("SELECT count(*) FROM samples_5m").fetchall()[0][0]
    assert rolled > 0
    bounded, every = both(store, 7200)
    assert bounded == every
    hot = {(p.node, p.device) for _, ports in bounded for p in ports}
    assert hot == {("n1", "mlx5_2"), ("n1", "mlx5_3"), ("n2", "mlx5_0")}


def test_a_window_longer_than_the_step_over_rolled_up_buckets(store: Store) -> None:
    """10-minute windows every 5 minutes over roll-ups: each bucket bounds two windows."""
    shares = [0.95, 0.95, 0.5, 0.95, 0.95, 0.95, 0.95, 0.95, 0.2, 0.95, 0.95, 0.95, 0.95]
    node = Node(store, "n1", {"mlx5_0": lambda t: shares[min(int(t // 300), 12)],
                              "mlx5_1": const(0.85), "mlx5_2": const(0.1)})  # fmt: skip
    node.play(3900)
    store.apply_retention(at(3000) + store.retention.rollup_delay)
    cfg = AnalyticsSettings(ib_hot_window_minutes=10)
    bounded, every = both(store, 3900, cfg)
    assert bounded == every and sum(bool(p) for _, p in bounded) >= 5


def spells(shares: list[float]) -> Profile:
    """A share for each 5 minutes (the last one on after)."""
    return lambda t: shares[min(int(t // 300), len(shares) - 1)]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shares=st.lists(
        st.lists(st.sampled_from([0.0, 0.3, 0.72, 0.79, 0.8, 0.81, 0.9, 1.0]), min_size=8,
                 max_size=8),
        min_size=1, max_size=3,
    ),
    step=st.sampled_from([15, 30, 60]),
    rolled_minutes=st.sampled_from([0, 20, 35, 60]),
    halve_at=st.sampled_from([None, 900, 1500]),
)  # fmt: skip
def test_bound_equals_every_port_on_random_profiles(
    tmp_path_factory: pytest.TempPathFactory,
    shares: list[list[float]],
    step: int,
    rolled_minutes: int,
    halve_at: int | None,
) -> None:
    """Ports whose share changes every 5 minutes (8 spells), scraped every ``step``
    seconds, a link rate that may halve, and the first ``rolled_minutes`` rolled up:
    the bound's answer is the unbounded one."""
    path = tmp_path_factory.mktemp("prefilter") / "r.duckdb"
    with Store.open(path) as store:
        profiles = {f"mlx5_{i}": spells(s) for i, s in enumerate(shares)}
        node = Node(store, "n1", profiles)
        node.step = step
        if halve_at is not None:
            node.link_rate = lambda t: RATE if t < halve_at else RATE / 2
        node.play(2400)
        if rolled_minutes:
            store.apply_retention(at(rolled_minutes * 60) + store.retention.rollup_delay)
        bounded, every = both(store, 2400)
        assert bounded == every


def test_history_reads_no_raw_steps_of_a_port_far_under_the_line(store: Store) -> None:
    """The point of the bound: with a busy port and an idle one over rolled-up data, only
    the busy one's windows are read (the candidates name its rate gauge alone)."""
    node = Node(store, "n1", {"mlx5_0": const(0.97), "mlx5_1": const(0.05)})
    node.play(3600)
    store.apply_retention(at(3600) + timedelta(hours=1))
    cur = store.cursor()
    links = dict(
        cur.execute(
            "SELECT device, series_id FROM series "
            "WHERE metric = 'gpuscope_ib_port_rate_bytes_per_second'"
        ).fetchall()
    )
    chosen = candidate_links(cur, at(0), at(3600), CFG)
    assert set().union(*chosen.values()) == {links["mlx5_0"]}
