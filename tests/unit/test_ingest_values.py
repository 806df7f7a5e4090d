"""Values and pages no target may use to corrupt ingest: out-of-range timestamps, NaN and
infinite counters, TYPE lines of one target read for another, duplicate series, label
limits, series churn, credentials in URLs (issue 13)."""

import json
import math
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.scraping.batch import Batch, Labels
from gpuscope.collector.scraping.fetch import redact_url
from gpuscope.collector.scraping.ingest import IngestWriter
from gpuscope.collector.scraping.limits import ChurnGuard, IngestLimits, LimitExceeded, check_page
from gpuscope.collector.scraping.outcome import ScrapeOutcome, Target
from gpuscope.collector.scraping.page_outcome import page_to_outcome
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import BadBatch, Store

T0 = datetime(2025, 3, 3, 10, 0, 0)
UTIL = "gpuscope_gpu_utilization_ratio"
ENERGY = "gpuscope_gpu_energy_joules_total"
GPU0 = (("gpu", "0"), ("node", "n1"), ("uuid", "GPU-0"))


def ms(t: datetime) -> int:
    return int(t.replace(tzinfo=UTC).timestamp() * 1000)


def at(i: int) -> int:
    return ms(T0 + timedelta(seconds=15 * i))


def stored(store: Store, metric: str, labels: tuple[tuple[str, str], ...]) -> list[float]:
    sid = store.series_id(metric, labels)
    cur = store.cursor()
    got = cur.execute("SELECT value FROM samples WHERE series_id = ? ORDER BY ts", [sid])
    return [r[0] for r in got.fetchall()]


def test_a_2_to_the_62_ms_timestamp_is_refused_before_the_transaction(tmp_path: Path) -> None:
    """Before: DuckDB's ConversionException inside the cycle's one transaction lost every
    target's samples. Now the store refuses that batch up front, naming its target, and a
    cycle without it commits."""
    hostile = Batch("evil", at(0), [UTIL], [GPU0], [0.5], {}, [2**62])
    healthy = Batch("agent", at(0), [UTIL], [(("gpu", "1"), ("node", "n1"))], [0.7], {})
    with Store.open(tmp_path / "s.duckdb") as store:
        with pytest.raises(BadBatch) as refused:
            store.append_cycle([(hostile, 0.0), (healthy, 0.0)])
        assert refused.value.target == "evil"
        assert store.append_cycle([(healthy, 0.0)]) == [1]
        assert store.samples_stored() == 1


def test_the_scrape_path_drops_out_of_window_timestamps_and_counts_them() -> None:
    """A sample stamped 2^62 ms (or an hour from now) is dropped and counted; the rest of
    the page stays."""
    now = T0.replace(tzinfo=UTC).timestamp()
    page = (
        f"a_ratio 1 {2**62}\nb_ratio 2 {int(now * 1000) + 3_600_000}\n"
        f"c_ratio 3 {int(now * 1000) - 5_000}\nd_ratio 4\n"
    ).encode()
    o = page_to_outcome(Target("http://h:1/metrics"), page, now)
    assert o.up and o.batch is not None
    assert o.batch.names == ["c_ratio", "d_ratio"]
    assert o.dropped == {"out_of_bounds": 2}
    assert "2 samples dropped (out_of_bounds)" in o.error


def test_a_nan_counter_neither_stores_nor_becomes_the_baseline(tmp_path: Path) -> None:
    """Before: NaN was stored as an increase, became last_raw, and the next sample was one
    increase of the whole total (10^12 bytes). Now the NaN is skipped and the next sample
    is the increase since the last real value; a gauge keeps its NaN as Prometheus does."""
    types = {"gpuscope_gpu_energy_joules": "counter", UTIL: "gauge"}
    values = [1e12, math.nan, 1e12 + 5, math.inf, 1e12 + 7]
    with Store.open(tmp_path / "n.duckdb") as store:
        for i, v in enumerate(values):
            gauge = math.nan if i == 1 else 0.5
            b = Batch("t", at(i), [ENERGY, UTIL], [GPU0, GPU0], [v, gauge], types)
            store.append_cycle([(b, 0.0)])
        assert stored(store, ENERGY, GPU0) == [0.0, 5.0, 2.0]
        gauge_values = stored(store, UTIL, GPU0)
        assert len(gauge_values) == 5 and math.isnan(gauge_values[1])
        # samples_stored counts the rows really stored (the two skipped counters are not)
        assert store.samples_stored() == 8


def test_a_type_line_of_one_target_does_not_retype_another_targets_series(
    tmp_path: Path,
) -> None:
    """Before: types.update across a cycle let a hostile `# TYPE ... counter` turn the
    agent's utilization into a counter for good."""
    agent = Batch("agent", at(0), [UTIL], [GPU0], [0.5], {UTIL: "gauge"})
    evil_labels = (("instance", "evil:1"),)
    evil = Batch("evil", at(0), [UTIL], [evil_labels], [3.0], {UTIL: "counter"})
    with Store.open(tmp_path / "t.duckdb") as store:
        store.append_cycle([(evil, 0.0), (agent, 0.0)])
        store.append_cycle([(agent.__class__("agent", at(1), [UTIL], [GPU0], [0.25], {}), 0.0)])
        kinds = dict(
            store.cursor()
            .execute("SELECT CAST(labels AS VARCHAR) || coalesce(node, ''), kind FROM series")
            .fetchall()
        )
        assert stored(store, UTIL, GPU0) == [0.5, 0.25]  # a gauge: values, not increases
    assert sorted(kinds.values()) == ["counter", "gauge"]


def test_a_duplicate_series_in_one_page_is_counted_and_the_first_kept() -> None:
    """Before: the last value won silently. Prometheus rejects the duplicate sample."""
    page = b'm_ratio{a="1"} 0.1\nm_ratio{a="2"} 0.2\nm_ratio{a="1"} 0.9\n'
    o = page_to_outcome(Target("http://h:1/metrics"), page, 1.7e9)
    assert o.batch is not None and o.batch.values == [0.1, 0.2]
    assert o.dropped == {"duplicate": 1}


def test_label_and_sample_limits_fail_the_page_whole() -> None:
    """Over label_limit or sample_limit, the page fails with the limit named."""
    limits = IngestLimits(label_limit=3, sample_limit=2)
    wide = Batch("t", 0, ["m"], [tuple((f"l{i}", "v") for i in range(4))], [1.0])
    with pytest.raises(LimitExceeded) as exc:
        check_page(wide, limits)
    assert exc.value.reason == "label_limit" and "has 4 labels" in str(exc.value)
    many = Batch("t", 0, ["a", "b", "c"], [(), (), ()], [1.0, 2.0, 3.0])
    with pytest.raises(LimitExceeded) as exc:
        check_page(many, limits)
    assert exc.value.reason == "sample_limit"


def test_series_churn_is_bounded_per_target_and_overall() -> None:
    """A label set that changes every scrape creates at most the hourly budget of series
    after the target's first page; another target's budget is its own."""
    now = [3600.0 * 1000]
    guard = ChurnGuard(
        IngestLimits(new_series_per_target_per_hour=5, new_series_per_hour=8), lambda: now[0]
    )
    known: set[tuple[str, tuple[tuple[str, str], ...]]] = set()

    def page(target: str, scrape: int) -> Batch:
        labs: list[Labels] = [(("id", f"{target}-{scrape}-{i}"),) for i in range(4)]
        return Batch(target, 0, ["m"] * 4, labs, [1.0] * 4)

    def admit(b: Batch) -> tuple[int, Counter[str]]:
        kept, dropped = guard.admit(b, lambda m, lab: (m, lab) not in known, len(known))
        known.update(zip(kept.names, kept.labels, strict=True))
        guard.stored(b.target)
        return len(kept), dropped

    assert admit(page("churner", 0)) == (4, Counter())  # the first page is free
    assert admit(page("churner", 1)) == (4, Counter())
    assert admit(page("churner", 2)) == (1, Counter({"series_churn": 3}))
    assert admit(page("churner", 3)) == (0, Counter({"series_churn": 4}))
    assert admit(page("other", 0)) == (4, Counter())
    assert admit(page("other", 1)) == (3, Counter({"series_churn_total": 1}))
    now[0] += 3600  # a new hour, a new budget
    assert admit(page("churner", 4)) == (4, Counter())


def test_the_writer_keeps_a_churning_targets_known_series(tmp_path: Path) -> None:
    """Through the writer and a real store: the churner's new series stop at the budget,
    its steady series keep being stored, and the drop is counted for the target."""
    limits = IngestLimits(new_series_per_target_per_hour=10)
    with Store.open(tmp_path / "c.duckdb") as store:
        registry = TargetRegistry([Target("http://churn:1/metrics")])
        metrics = CollectorMetrics()
        writer = IngestWriter(store, registry, metrics, limits, clock=lambda: 7200.0)
        for i in range(6):
            labs: list[Labels] = [GPU0, *((("id", f"{i}-{j}"),) for j in range(5))]
            b = Batch("http://churn:1/metrics", at(i), [UTIL] * 6, labs, [0.5] * 6, {})
            o = ScrapeOutcome(Target("http://churn:1/metrics"), at(i) / 1000, 0.0, True, batch=b)
            writer.write([o])
        assert store.series_known == 6 + 10
        assert len(stored(store, UTIL, GPU0)) == 6
    (status,) = registry.status()
    assert status["samples_dropped"] == {"series_churn": 15}
    assert "new series dropped (series_churn)" in status["last_error"]


def test_credentials_in_a_target_url_are_redacted_but_used_to_fetch() -> None:
    t = Target("http://scraper:hunter2@10.0.0.1:9835/metrics")
    assert t.url == "http://scraper:xxxxx@10.0.0.1:9835/metrics"
    assert t.fetch_url == "http://scraper:hunter2@10.0.0.1:9835/metrics"
    assert "hunter2" not in repr(t) and "hunter2" not in json.dumps(t.url)
    assert redact_url("http://10.0.0.1:9835/metrics") == "http://10.0.0.1:9835/metrics"
    assert redact_url("https://user@h/p") == "https://user@h/p"


def test_a_nan_in_a_stored_record_becomes_null_so_the_json_stays_valid(tmp_path: Path) -> None:
    """Before: json.dumps wrote a NaN literal into the findings' JSON column."""
    finding = {
        "id": "f1", "kind": "idle_session", "severity": "info", "subject": {"node": "n1"},
        "since": T0, "observed_at": T0, "recommendation": None,
        "evidence": {"mean_utilization": math.nan, "peaks": [1.0, math.inf]},
    }  # fmt: skip
    with Store.open(tmp_path / "f.duckdb") as store:
        store.record_findings([finding], T0, kinds=["idle_session"])
        (got,) = store.findings()
    assert got["evidence"] == {"mean_utilization": None, "peaks": [1.0, None]}
    json.dumps(got["evidence"], allow_nan=False)
