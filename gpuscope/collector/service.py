"""The collector as a running service: scheduled jobs around one store, and the HTTP API.

Each target is scraped on its own schedule (gpuscope/collector/scraping/scrape_loop.py) and stored
through one writer (gpuscope/collector/scraping/ingest.py); APScheduler runs query-API ingest
(instead of scraping), the Kubernetes inventory sync with target discovery, and retention with
Parquet export; each job never overlaps itself and a failing run is logged and counted, never fatal.
The one fatal thing is a database that refuses every write past a bounded retry: the service then
stops with one line, so that Kubernetes restarts it. SIGTERM stops the API, lets the running jobs
finish and closes the database cleanly.

Serving it (the API's socket, uvicorn, the stop on SIGTERM/SIGINT) is
gpuscope/collector/serving.py.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
from apscheduler.schedulers.background import BackgroundScheduler

from gpuscope.collector.cluster.inventory_records import QuotaInfo
from gpuscope.collector.cluster.pdb_records import budget_record
from gpuscope.collector.gauges.database_gauges import DatabaseGauges
from gpuscope.collector.gauges.inventory_gauges import InventoryGauges
from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.gauges.target_gauges import TargetGauges
from gpuscope.collector.scraping.ingest import IngestWriter, StoreFailed, first_line
from gpuscope.collector.scraping.limits import IngestLimits
from gpuscope.collector.scraping.outcome import Target
from gpuscope.collector.scraping.scrape import Scraper
from gpuscope.collector.scraping.scrape_loop import ScrapeLoop, commit_ticks
from gpuscope.collector.scraping.targets import TargetRegistry, discover_targets
from gpuscope.collector.storage.store import Retention, Store
from gpuscope.core.collector_settings import CollectorSettings
from gpuscope.core.errors import SourceError, UserError
from gpuscope.core.settings import Settings

# The HTTP API (FastAPI: ~25 MB resident) is imported where it is served, and the query
# source (httpx, which brings click, rich and pygments: ~18 MB) where one is configured:
# ``gpuscope demo`` runs this service with neither, and does without that memory (issue 39).
if TYPE_CHECKING:
    from gpuscope.collector.cluster.inventory import KubeInventory
    from gpuscope.collector.http_api.api import ApiState
    from gpuscope.collector.http_api.api_whatif import WhatIf
    from gpuscope.collector.querying.query_ingest import QueryIngest

log = logging.getLogger(__name__)


def retention_of(cs: CollectorSettings) -> Retention:
    """The store's retention and compaction as the collector's settings give them."""
    return Retention(
        raw_days=cs.raw_retention_days,
        rollup_5m_days=cs.rollup_5m_retention_days,
        rollup_1h_days=cs.rollup_1h_retention_days,
        compact_segment_s=cs.compact_segment_seconds,
        compact_recent_s=cs.compact_recent_seconds,
        rollup_delay=timedelta(seconds=cs.late_batch_seconds),
    )


class CollectorService:
    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.time) -> None:
        cs = settings.collector
        token = cs.collector_api_token()  # a guessable token stops the start, nothing opened
        self.settings = settings
        self.clock = clock
        self.store = Store.open(
            cs.db,
            retention=retention_of(cs),
            memory_limit=cs.db_memory_limit,
            threads=cs.db_threads,
        )
        self.metrics = CollectorMetrics()
        self.metrics.registry.register(InventoryGauges(self.store.cursor))
        self.metrics.registry.register(DatabaseGauges(self.store))
        self.targets = TargetRegistry([Target(t.url, t.kind, t.node) for t in cs.targets])
        self.metrics.registry.register(TargetGauges(self.targets.last_scrapes))
        self.limits = IngestLimits(
            sample_limit=cs.max_series_per_target,
            label_limit=cs.max_labels_per_series,
            label_value_length_limit=cs.max_label_value_bytes,
            body_size_limit=cs.max_body_bytes,
            new_series_per_target_per_hour=cs.max_new_series_per_target_per_hour,
            new_series_per_hour=cs.max_new_series_per_hour,
            max_series=cs.max_series,
        )
        self.scraper = Scraper(
            timeout_seconds=cs.effective_scrape_timeout(), limits=self.limits, clock=clock
        )
        self.writer = IngestWriter(
            self.store,
            self.targets,
            self.metrics,
            self.limits,
            clock=clock,
            retry_seconds=cs.store_failure_exit_seconds,
        )
        self.scrape_loop: ScrapeLoop | None = None
        #: Set when ingest gave up on the store: why the process must exit (one line).
        self.fatal = ""
        #: Called with that line; run_collector stops the server with it.
        self.on_fatal: Callable[[str], None] = self._log_fatal
        self.query_source: QueryIngest | None = None
        if cs.prometheus_url:
            from gpuscope.collector.querying.query_ingest import QueryIngest, QueryIngestMetrics

            self.query_source = QueryIngest(
                cs.prometheus_url,
                cs.query,
                cs.scrape_interval_seconds,
                self.store,
                self._write_batch,
                analytics=settings.analytics,
            )
            self.metrics.registry.register(QueryIngestMetrics(self.query_source, clock))
        self.inventory = self._make_inventory()
        self._cycles = 0
        self._lock = threading.Lock()
        self.scheduler = BackgroundScheduler(
            timezone=UTC,
            job_defaults={
                "coalesce": True,
                "max_instances": 1,
                "misfire_grace_time": int(cs.scrape_interval_seconds * 4) + 1,
            },
        )
        self.token = token
        #: API routers added by the layers above (see ApiState.routers).
        self.routers: list[Callable[[list[Any], list[Any]], Any]] = []
        #: Routers of expensive read routes (see ApiState.expensive_routers).
        self.expensive_routers: list[Callable[[list[Any], list[Any]], Any]] = []
        if self.query_source is not None:  # a finding's per-GPU series, from the engine
            from gpuscope.collector.http_api.api_drilldown import drilldown_router

            source = self.query_source
            self.routers.append(partial(drilldown_router, self.store, lambda: source.client))
        #: The what-if replay for GET /api/v1/whatif (see ApiState.whatif).
        self.whatif: WhatIf | None = None

    def _make_inventory(self) -> KubeInventory | None:
        mode = self.settings.collector.kubernetes
        if mode == "none":
            return None
        # the Kubernetes client (~22 MB resident, 0.2 s to import) only where a cluster may
        # be asked: a fleet-mode collector or the demo (``kubernetes: none``) never loads it
        from gpuscope.collector.cluster.inventory import (
            InventoryError,
            KubeInventory,
            kube_configuration,
        )

        try:
            cfg = kube_configuration(self.settings.collector)
        except InventoryError as exc:
            if mode == "auto":
                log.info("no Kubernetes API; inventory and discovery off reason=%s", exc)
                return None
            raise UserError(f"collector.kubernetes={mode}: {exc}") from None
        return None if cfg is None else KubeInventory(cfg, settings=self.settings.workloads)

    # -- jobs -------------------------------------------------------------------------------
    def scrape_cycle(self) -> int:
        """Scrape every target once, now, and store what they gave (demo, tests and
        ``POST /api/v1/scrape``; the running service scrapes each target on its own
        schedule, see :meth:`start_jobs`)."""
        with self._lock, self.metrics.cycle_seconds.time():
            outcomes = self.scraper.scrape(self.targets.targets())
            stored = self.writer.write(outcomes)
            self._cycles += 1
            return stored

    def _log_fatal(self, message: str) -> None:
        self.fatal = message
        log.critical("%s", message)

    def _write_batch(self, batch: Any, *, meta: Mapping[str, str] | None = None) -> int:
        return self.writer.write_batch(batch, meta=meta)

    def query_cycle(self) -> int:
        """Ask the Prometheus-compatible query API what is due (fleet mode: the closed
        5-minute buckets' summaries; pull mode: whole steps of raw series) and store it."""
        assert self.query_source is not None
        with self._lock, self.metrics.cycle_seconds.time():
            stored = self.query_source.cycle(self.clock())
            self._cycles += 1
            return stored

    def inventory_cycle(self) -> None:
        cs = self.settings.collector
        now = datetime.fromtimestamp(self.clock(), UTC)
        quotas: list[Any] = [
            QuotaInfo(project=p.name, guaranteed_gpus=p.guaranteed_gpus, source="config")
            for p in cs.projects
        ]
        if self.inventory is None:
            # Without Kubernetes the settings are this collector's only quota source, and
            # none configured means it knows nothing: it must not end the quotas recorded
            # by someone else (the demo's simulated API server), or every project would
            # read as guaranteed 0 GPUs and over quota.
            if quotas:
                self.store.record_inventory(now, quotas=quotas)
            return
        try:
            snap = self.inventory.sync_once()
            if cs.discovery.enabled:
                api = self.inventory.api_client
                self.targets.set_discovered(discover_targets(api, cs.discovery))
        except SourceError as exc:
            self.metrics.inventory_syncs.labels("error").inc()
            log.warning("inventory sync failed error=%s", exc)
            return
        self.metrics.inventory_syncs.labels("ok").inc()
        # the settings' guarantees take precedence over a queue or quota of the same name;
        # LocalQueues, Cohorts and ResourceFlavors are no one's guarantee and always kept
        configured = {q.project for q in quotas}
        keep = ("kueue-localqueue", "kueue-cohort", "kueue-flavor")
        quotas += [q for q in snap.quotas if q.source in keep or q.project not in configured]
        pdbs = None if snap.pdbs is None else [budget_record(b) for b in snap.pdbs]
        self.store.record_inventory(now, nodes=snap.nodes, pods=snap.pods, quotas=quotas, pdbs=pdbs)

    def retention_cycle(self) -> dict[str, int]:
        """Hourly: roll closed buckets up, delete what is past retention, compact closed
        days and the closed segments of the day being written (each once), then give the
        file's free blocks back when they are ``db_reclaim_free_ratio`` of it or more
        (writes and readers wait for the swap; docs/storage.md, "Giving space back")."""
        cs = self.settings.collector
        return self.store.maintain(
            datetime.fromtimestamp(self.clock(), UTC),
            reclaim_free_ratio=cs.db_reclaim_free_ratio,
            reader_wait_s=cs.db_reclaim_reader_wait_seconds,
        )

    def daily_cycle(self) -> None:
        """Once a day: export yesterday to day-partitioned Parquet, when a folder is set."""
        now = datetime.fromtimestamp(self.clock(), UTC)
        parquet = self.settings.collector.parquet_dir
        if parquet is not None:
            self.store.export_day((now - timedelta(days=1)).date(), parquet, now=now)

    def _guarded(self, name: str, job: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            try:
                job()
            except StoreFailed as exc:
                self.on_fatal(str(exc))
            except (duckdb.Error, OSError) as exc:  # the store's trouble: one line, no trace
                self.metrics.job_errors.labels(name).inc()
                log.error("job failed job=%s error=%s", name, first_line(exc))
            except SourceError as exc:  # a source's answer (a query API down): one line
                self.metrics.job_errors.labels(name).inc()
                log.warning("job failed job=%s error=%s", name, first_line(exc))
            except Exception:
                self.metrics.job_errors.labels(name).inc()
                log.exception("job failed job=%s", name)

        return run

    # -- lifecycle --------------------------------------------------------------------------
    def start_jobs(self) -> None:
        cs = self.settings.collector
        # on a whole second: samples keep whole-second timestamps, so cycles that start on
        # one are stored with their true spacing (rates over short windows stay exact)
        first = datetime.fromtimestamp(math.ceil(time.time()), UTC)
        if self.query_source is not None:
            self.scheduler.add_job(
                self._guarded("ingest", self.query_cycle),
                "interval",
                seconds=cs.query.interval_seconds
                if cs.query.mode == "fleet"
                else cs.scrape_interval_seconds,
                id="ingest",
                next_run_time=first,
            )
        else:  # each target on its own schedule: a slow one never delays the others
            self.scrape_loop = ScrapeLoop(
                self.scraper,
                self.targets.targets,
                self.writer.write,
                cs.scrape_interval_seconds,
                on_fatal=self.on_fatal,
                commit_ticks=commit_ticks(cs.scrape_interval_seconds),
            )
            self.scrape_loop.start()
        self.scheduler.add_job(
            self._guarded("inventory", self.inventory_cycle),
            "interval",
            seconds=cs.inventory_interval_seconds,
            id="inventory",
            next_run_time=first,
        )
        every = cs.maintenance_interval_seconds
        trigger: dict[str, Any] = (
            {"trigger": "cron", "minute": 7}
            if every == 3600
            else {"trigger": "interval", "seconds": every}
        )
        self.scheduler.add_job(
            self._guarded("retention", self.retention_cycle), id="retention", **trigger
        )
        self.scheduler.start()

    def api_state(self) -> ApiState:
        from gpuscope.collector.http_api.api import ApiState

        return ApiState(
            store=self.store,
            targets=self.targets,
            metrics=self.metrics,
            token=self.token,
            read_requires_token=self.settings.collector.read_requires_token,
            scrape_now=self.scrape_cycle if self.query_source is None else self.query_cycle,
            retention_now=self.retention_cycle,
            ready=self.ready,
            ingest_status=self.ingest_status,
            clock=self.clock,
            routers=list(self.routers),
            whatif=self.whatif,
            expensive_routers=list(self.expensive_routers),
            expensive_reads_require_token=self.settings.collector.expensive_reads_require_token,
            expensive_reads_concurrency=self.settings.collector.expensive_reads_concurrency,
            whatif_max_seeds=self.settings.collector.whatif_max_seeds,
            # the file it holds: the CLI beside it checks it is the one it was given
            extra_status={"database": str(Path(self.settings.collector.db).resolve())},
        )

    def ready(self) -> bool:
        """Ready once something has been stored, and while the store can write."""
        return (self._cycles > 0 or self.writer.commits > 0) and self.writer.store_ok

    def ingest_status(self) -> dict[str, Any]:
        limits = {f.name: getattr(self.limits, f.name) for f in dataclasses.fields(self.limits)}
        out = {**self.writer.status(), "limits": limits, "database": self._db_status()}
        if self.query_source is not None:
            out["query_source"] = self.query_source.status(self.clock())
        return out

    def _db_status(self) -> dict[str, Any]:
        """The running rewrites of the file (docs/storage.md, "Giving space back")."""
        store = self.store
        return {
            "rewrites": store.rewrites,
            "last_rewrite_seconds": round(store.last_rewrite_s, 3),
            "writes_waited_for_rewrite": store.writes_waited,
            "readers_waited_for_rewrite": store.readers_waited,
        }

    def stop(self) -> None:
        if self.query_source is not None:  # an in-flight pull must not hold SIGTERM up
            self.query_source.cancel()
        if self.scrape_loop is not None:
            self.scrape_loop.stop()
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)
        if self.inventory is not None:
            self.inventory.close()
        try:
            self.store.close()
        except duckdb.Error as exc:  # a database that failed cannot always close cleanly
            log.warning("closing the database failed error=%s", first_line(exc))
