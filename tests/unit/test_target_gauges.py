"""Each target's last scrape on the collector's /metrics, built from the target registry
when /metrics is read (issue 39), and the scrape counters counted once a group."""

from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.gauges.target_gauges import TargetGauges
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.scraping.ingest import IngestWriter
from gpuscope.collector.scraping.limits import IngestLimits
from gpuscope.collector.scraping.outcome import ScrapeOutcome, Target
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store

UTIL = "gpuscope_gpu_utilization_ratio"
T = 1_741_000_000.0
GOOD, BAD, NEVER = "http://good:1/metrics", "http://bad:1/metrics", "http://never:1/metrics"


def page(url: str, at: float, values: list[float]) -> ScrapeOutcome:
    labels = [(("gpu", str(i)), ("instance", url)) for i in range(len(values))]
    b = Batch(url, int(at * 1000), [UTIL] * len(values), labels, values, {UTIL: "gauge"})
    return ScrapeOutcome(Target(url), at, 0.25, True, batch=b)


def exposition(metrics: CollectorMetrics) -> dict[tuple[str, tuple[str, ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.values()))): s.value
        for fam in text_string_to_metric_families(generate_latest(metrics.registry).decode())
        for s in fam.samples
    }


def test_last_scrape_of_each_scraped_target_and_counts_by_result(tmp_path: Path) -> None:
    registry = TargetRegistry([Target(GOOD), Target(BAD), Target(NEVER)])
    metrics = CollectorMetrics()
    metrics.registry.register(TargetGauges(registry.last_scrapes))
    with Store.open(tmp_path / "s.duckdb") as store:
        writer = IngestWriter(store, registry, metrics, IngestLimits())
        down = ScrapeOutcome(Target(BAD), T, 1.5, False, "HTTP 500", reason="http")
        writer.write([page(GOOD, T, [0.5, 0.7, 0.9]), down])
        got = exposition(metrics)
        assert got[("gpuscope_collector_target_up", (GOOD,))] == 1
        assert got[("gpuscope_collector_target_up", (BAD,))] == 0
        assert got[("gpuscope_collector_scrape_duration_seconds", (BAD,))] == 1.5
        assert got[("gpuscope_collector_target_samples", (GOOD,))] == 3
        assert got[("gpuscope_collector_target_samples", (BAD,))] == 0
        # a target never scraped has no series yet
        assert not any(NEVER in labels for _, labels in got)
        assert got[("gpuscope_collector_scrapes_total", ("up",))] == 1
        assert got[("gpuscope_collector_scrapes_total", ("down",))] == 1
        # the next tick: the gauges follow the last scrape, the counters add up
        writer.write([page(GOOD, T + 5, [0.5]), page(BAD, T + 5, [0.1, 0.2])])
        got = exposition(metrics)
        assert got[("gpuscope_collector_target_up", (BAD,))] == 1
        assert got[("gpuscope_collector_target_samples", (GOOD,))] == 1
        assert got[("gpuscope_collector_target_samples", (BAD,))] == 2
        assert got[("gpuscope_collector_scrapes_total", ("up",))] == 3
        assert got[("gpuscope_collector_scrapes_total", ("down",))] == 1
