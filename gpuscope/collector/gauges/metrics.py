"""The collector's own metrics on its ``/metrics``: ingest, targets, storage.

Kept in a private registry (not the process-global one) so tests and several collectors in
one process do not collide. Analytics add their gauges here as they land.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpuscope.collector.gauges.analytics_gauges import AnalyticsGauges


class CollectorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.scrapes = Counter(
            "gpuscope_collector_scrapes",
            "Ticks of the targets' schedules by result: up, down (a failed scrape, also one "
            "past its timeout) or skipped (no scrape: the previous one ran past the tick).",
            ["result"],
            registry=r,
        )
        self.scrape_skipped = Counter(
            "gpuscope_collector_scrape_skipped",
            "Ticks of a target's schedule that passed without a scrape.",
            ["target"],
            registry=r,
        )
        self.samples_ingested = Counter(
            "gpuscope_collector_samples_ingested", "Samples committed to the store.", registry=r
        )
        self.parse_errors = Counter(
            "gpuscope_collector_parse_errors",
            "Malformed exposition lines, by target.",
            ["target"],
            registry=r,
        )
        self.scrape_failures = Counter(
            "gpuscope_collector_scrape_failures",
            "Failed scrapes by target and reason (timeout, connect, http, page, "
            "body_size_limit, sample_limit, label_limit, store).",
            ["target", "reason"],
            registry=r,
        )
        self.samples_dropped = Counter(
            "gpuscope_collector_samples_dropped",
            "Samples of scraped pages left out, by target and reason (out_of_bounds, "
            "duplicate, series_churn, series_churn_total, series_limit, store_backlog).",
            ["target", "reason"],
            registry=r,
        )
        self.store_up = Gauge(
            "gpuscope_collector_store_up",
            "1 while the database accepts writes; 0 while writes fail (the collector exits "
            "after collector.store_failure_exit_seconds).",
            registry=r,
        )
        self.store_write_failures = Counter(
            "gpuscope_collector_store_write_failures",
            "Ingest writes the database refused for a reason of its own (disk full, I/O).",
            registry=r,
        )
        self.cycle_seconds = Histogram(
            "gpuscope_collector_cycle_seconds",
            "Scrape-and-store cycle duration.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.samples_stored = Gauge(
            "gpuscope_collector_samples_stored",
            "Raw sample rows acknowledged since the database began.",
            registry=r,
        )
        self.series = Gauge("gpuscope_collector_series", "Series known to the store.", registry=r)
        self.inventory_syncs = Counter(
            "gpuscope_collector_inventory_syncs",
            "Kubernetes inventory syncs by result.",
            ["result"],
            registry=r,
        )
        self.job_errors = Counter(
            "gpuscope_collector_job_errors",
            "Scheduled jobs that raised, by job.",
            ["job"],
            registry=r,
        )
        self.analytics_seconds = Gauge(
            "gpuscope_collector_analytics_seconds",
            "Duration of the last run of each detector.",
            ["detector"],
            registry=r,
        )
        self.actions = Counter(
            "gpuscope_actions",
            "Action steps planned or carried out, by action, result and dry run.",
            ["action", "result", "dry_run"],
            registry=r,
        )
        self.analytics = AnalyticsGauges()
        r.register(self.analytics)
