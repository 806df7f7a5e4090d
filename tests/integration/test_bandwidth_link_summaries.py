"""The GPU-link detector reading fleet summaries' rows (issue 40): a hot link's bucket
increases stored as gauges under the counter's name, only in the buckets the link was over
the floor, each at its bucket's last second (what ``collector.query.summaries`` stores).
Its first stored bucket counts as that bucket (a summary's sample is one bucket's
increase), so a link hot for the window is found even when the bucket before it was cool;
a gap of unstored buckets lowers the rate, never raises it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuscope.analytics.detectors.bandwidth import run_bandwidth
from gpuscope.collector.querying.fleet_summaries import GAUGE_TYPES
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store
from tests.integration.test_bandwidth import A100, CFG, GPU_INFO, H100, NVLINK, at, lab, ms

BUCKET = 300
CAPACITY = 450e9  # H100 NVLink, bytes/s a direction


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "s.duckdb") as s:
        yield s


def _gpu(gpu: str) -> dict[str, str]:
    return {"node": "g1", "gpu": gpu, "uuid": f"GPU-g1-{gpu}", "mig_instance": ""}


def _store_buckets(store: Store, shares: dict[str, dict[int, float]]) -> None:
    """Per GPU, per bucket index ``k`` (the bucket ``[300k, 300k + 300)``), its NVLink's tx
    share of capacity in that bucket, stored as fleet summaries store a hot link: the
    bucket's increase (rx at half) at its last second, a gauge, with the GPU's info."""
    by_ts: dict[int, Batch] = {}
    for gpu, buckets in shares.items():
        for k, share in buckets.items():
            t = ms(at(k * BUCKET + BUCKET - 1))
            b = by_ts.setdefault(t, Batch("fleet", t, [], [], [], dict(GAUGE_TYPES)))
            inc = share * CAPACITY * BUCKET
            b.names.extend([NVLINK, NVLINK, GPU_INFO])
            b.labels.extend(
                [
                    lab(**_gpu(gpu), direction="tx"),
                    lab(**_gpu(gpu), direction="rx"),
                    lab(**_gpu(gpu), model=H100),
                ]
            )
            b.values.extend([inc, inc / 2, 1.0])
    for t in sorted(by_ts):
        store.append_scrape(by_ts[t])


def test_summaries_link_types_are_gauges() -> None:
    assert GAUGE_TYPES[NVLINK] == "gauge"


def test_a_link_hot_in_its_first_stored_bucket_is_found(store: Store) -> None:
    """GPU 0 over the floor only in the window's bucket (the bucket before was cool, so
    nothing was stored): found, at its ratio. GPU 1 at 0.6 (over the floor, under the hot
    line) for two buckets: not hot."""
    _store_buckets(store, {"0": {3: 0.9}, "1": {2: 0.6, 3: 0.6}})
    result = run_bandwidth(store.cursor(), at(4 * BUCKET), CFG)
    [f] = result.findings
    assert f.kind == "nvlink_hotspot"
    assert f.subject == {"node": "g1", "gpu": "0", "uuid": "GPU-g1-0"}
    assert f.evidence["ratio"] == pytest.approx(0.9, abs=1e-3)
    assert f.evidence["share_of_window_hot"] == 1.0
    assert result.summary["nvlink_gpus"] == 2
    assert result.summary["max_nvlink_ratio"] == pytest.approx(0.9, abs=1e-3)


def test_consecutive_hot_buckets_give_the_links_rate(store: Store) -> None:
    _store_buckets(store, {"0": {k: 0.85 for k in range(6)}})
    cfg = CFG.model_copy(update={"ib_hot_window_minutes": 15})
    [f] = run_bandwidth(store.cursor(), at(6 * BUCKET), cfg).findings
    assert f.evidence["ratio"] == pytest.approx(0.85, abs=1e-3)


def test_a_gap_of_cool_buckets_lowers_the_rate(store: Store) -> None:
    """Hot in the first and third buckets of a 15-minute window, cool (unstored) between:
    the third bucket's increase is read over the 600 s since the first, never as hot."""
    _store_buckets(store, {"0": {3: 0.9, 5: 0.9}})
    cfg = CFG.model_copy(update={"ib_hot_window_minutes": 15})
    result = run_bandwidth(store.cursor(), at(6 * BUCKET), cfg)
    assert result.findings == []
    assert result.summary["max_nvlink_ratio"] == pytest.approx(0.9 * 2 / 3, abs=1e-3)


def _store_modelled(store: Store, share: float, model: str, info: str | None) -> None:
    """GPU 0's NVLink hot in buckets 0..2 as fleet summaries now store it: both directions'
    bucket increases carrying the GPU's ``model`` label (tx at ``share`` of the H100's
    capacity, rx at half), and a ``gpuscope_gpu_info`` of model ``info`` only if given."""
    for k in range(3):
        t = ms(at(k * BUCKET + BUCKET - 1))
        b = Batch("fleet", t, [], [], [], dict(GAUGE_TYPES))
        inc = share * CAPACITY * BUCKET
        for direction, value in (("tx", inc), ("rx", inc / 2)):
            b.names.append(NVLINK)
            b.labels.append(lab(**_gpu("0"), direction=direction, model=model))
            b.values.append(value)
        if info is not None:
            b.names.append(GPU_INFO)
            b.labels.append(lab(**_gpu("0"), model=info))
            b.values.append(1.0)
        store.append_scrape(b)


def test_a_link_rows_own_model_gives_its_capacity(store: Store) -> None:
    """Under summaries no gpuscope_gpu_info is stored for a hot link: the link rows' own
    ``model`` label (H100: 450 GB/s) gives the capacity, and the finding's evidence."""
    _store_modelled(store, 0.9, H100, None)
    [f] = run_bandwidth(store.cursor(), at(3 * BUCKET), CFG).findings
    assert f.kind == "nvlink_hotspot"
    assert f.evidence["model"] == H100
    assert f.evidence["ratio"] == pytest.approx(0.9, abs=1e-3)
    assert f.evidence["tx_bytes_per_second"] == pytest.approx(0.9 * CAPACITY, rel=1e-3)
    assert f.evidence["rx_bytes_per_second"] == pytest.approx(0.45 * CAPACITY, rel=1e-3)


def test_a_link_rows_own_model_wins_over_the_gpu_info(store: Store) -> None:
    """A link row's model (A100: 300 GB/s) is the one used, not a gpu_info's (H100):
    0.6 of 450 GB/s is 0.9 of 300 GB/s, hot only by the row's own model."""
    _store_modelled(store, 0.6, A100, H100)
    [f] = run_bandwidth(store.cursor(), at(3 * BUCKET), CFG).findings
    assert f.evidence["model"] == A100
    assert f.evidence["ratio"] == pytest.approx(0.9, abs=1e-3)
