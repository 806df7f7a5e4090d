"""Each target's last scrape as gauges on the collector's ``/metrics``, read when scraped.

``gpuscope_collector_target_up``, ``_scrape_duration_seconds`` and ``_target_samples`` are
what the target registry already keeps of each target's last scrape
(gpuscope/collector/scraping/targets.py, ``/api/v1/status``). They were set on three gauge
children per target on every scrape, three label lookups and three writes each time, ~20 us
of the writer's CPU per target and tick whether ``/metrics`` was read or not (issue 39: the
collector's per-tick cost at 8 agents); here they are built from the registry only when
``/metrics`` is read. A target shows once it has been scraped, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: (target URL, up, last scrape's duration in seconds, last scrape's samples)
LastScrape = tuple[str, bool, float, int]


class TargetGauges(Collector):
    """The three per-target gauges from ``last_scrapes()`` (the registry's
    :meth:`~gpuscope.collector.scraping.targets.TargetRegistry.last_scrapes`)."""

    def __init__(self, last_scrapes: Callable[[], Sequence[LastScrape]]) -> None:
        self._last_scrapes = last_scrapes

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "gpuscope_collector_target_up",
            "1 if the target's last scrape succeeded.",
            labels=["target"],
        )
        seconds = GaugeMetricFamily(
            "gpuscope_collector_scrape_duration_seconds",
            "Duration of the target's last scrape.",
            labels=["target"],
        )
        samples = GaugeMetricFamily(
            "gpuscope_collector_target_samples",
            "Samples in the target's last scrape.",
            labels=["target"],
        )
        for url, is_up, duration, count in self._last_scrapes():
            up.add_metric([url], 1.0 if is_up else 0.0)
            seconds.add_metric([url], duration)
            samples.add_metric([url], float(count))
        yield up
        yield seconds
        yield samples
