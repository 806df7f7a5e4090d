"""The collector as a running service: scheduled jobs around one store, and the HTTP API.

APScheduler runs the scrape loop (or query-API ingest), the Kubernetes inventory sync with
target discovery, and retention with Parquet export; each job never overlaps itself and a
failing run is logged and counted, never fatal. SIGTERM stops the API, lets the running
jobs finish and closes the database cleanly.
"""

from __future__ import annotations

import logging
import math
import signal
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from collector.api import ApiState, create_app
from collector.inventory import InventoryError, KubeInventory
from collector.inventory_gauges import InventoryGauges
from collector.inventory_records import QuotaInfo
from collector.metrics import CollectorMetrics
from collector.promql import PrometheusQuerySource
from collector.scrape import ScrapeOutcome, Scraper, Target
from collector.store import Retention, Store
from collector.targets import TargetRegistry, discover_targets
from gpuscope.errors import SourceError, UserError
from gpuscope.settings import Settings, parse_listen

log = logging.getLogger(__name__)


class CollectorService:
    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.time) -> None:
        cs = settings.collector
        token = cs.collector_api_token()  # a guessable token stops the start, nothing opened
        self.settings = settings
        self.clock = clock
        self.store = Store.open(
            cs.db,
            retention=Retention(
                raw_days=cs.raw_retention_days,
                rollup_5m_days=cs.rollup_5m_retention_days,
                rollup_1h_days=cs.rollup_1h_retention_days,
            ),
        )
        self.metrics = CollectorMetrics()
        self.metrics.registry.register(InventoryGauges(self.store.cursor))
        self.targets = TargetRegistry([Target(t.url, t.kind, t.node) for t in cs.targets])
        self.scraper = Scraper(
            timeout_seconds=cs.scrape_timeout_seconds,
            max_series=cs.max_series_per_target,
            max_label_value_bytes=cs.max_label_value_bytes,
            clock=clock,
        )
        self.query_source = (
            PrometheusQuerySource(cs.prometheus_url, step_seconds=cs.scrape_interval_seconds)
            if cs.prometheus_url
            else None
        )
        self._query_from = clock() - cs.scrape_interval_seconds * 4
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

    def _make_inventory(self) -> KubeInventory | None:
        mode = self.settings.collector.kubernetes
        workloads = self.settings.workloads
        if mode == "none":
            return None
        if mode.startswith(("http://", "https://")):
            return KubeInventory(mode, settings=workloads)
        try:
            return KubeInventory.from_environment(settings=workloads)
        except InventoryError as exc:
            if mode == "auto":
                log.info("no Kubernetes API; inventory and discovery off reason=%s", exc)
                return None
            raise UserError(f"collector.kubernetes={mode}: {exc}") from None

    # -- jobs -------------------------------------------------------------------------------
    def scrape_cycle(self) -> int:
        """Scrape every target once and store the whole cycle in one transaction."""
        with self._lock, self.metrics.cycle_seconds.time():
            outcomes = self.scraper.scrape(self.targets.targets())
            up = [o for o in outcomes if o.up and o.batch is not None]
            down = [
                (o.target.url, o.started_at, o.duration_seconds, o.error)
                for o in outcomes
                if not (o.up and o.batch is not None)
            ]
            counts = self.store.append_cycle(
                [(o.batch, o.duration_seconds) for o in up if o.batch is not None], down
            )
            for o in outcomes:
                self._account(o)
            stored = sum(counts)
            self.metrics.samples_ingested.inc(stored)
            self._cycles += 1
            return stored

    def _account(self, o: ScrapeOutcome) -> None:
        self.targets.record(o)
        url = o.target.url
        self.metrics.scrapes.labels("up" if o.up else "down").inc()
        self.metrics.target_up.labels(url).set(1 if o.up else 0)
        self.metrics.scrape_seconds.labels(url).set(o.duration_seconds)
        self.metrics.target_samples.labels(url).set(o.samples)
        if o.parse_errors:
            self.metrics.parse_errors.labels(url).inc(o.parse_errors)

    def query_cycle(self) -> int:
        """Pull new samples from the Prometheus-compatible query API."""
        assert self.query_source is not None
        with self._lock, self.metrics.cycle_seconds.time():
            end = self.clock() - self.settings.collector.scrape_interval_seconds  # let it land
            stored = 0
            for batch in self.query_source.fetch(self._query_from, end):
                stored += self.store.append_scrape(batch)
            self.metrics.samples_ingested.inc(stored)
            self._query_from = end + self.query_source.step_seconds
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
        configured = {q.project for q in quotas}
        quotas += [q for q in snap.quotas if q.project not in configured]
        self.store.record_inventory(now, nodes=snap.nodes, pods=snap.pods, quotas=quotas)

    def retention_cycle(self) -> dict[str, int]:
        """Hourly: roll closed buckets up, delete what is past retention, compact closed
        days (each once)."""
        return self.store.apply_retention(datetime.fromtimestamp(self.clock(), UTC))

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
            except Exception:
                self.metrics.job_errors.labels(name).inc()
                log.exception("job failed job=%s", name)

        return run

    # -- lifecycle --------------------------------------------------------------------------
    def start_jobs(self) -> None:
        cs = self.settings.collector
        ingest = self.query_cycle if self.query_source is not None else self.scrape_cycle
        # on a whole second: samples keep whole-second timestamps, so cycles that start on
        # one are stored with their true spacing (rates over short windows stay exact)
        first = datetime.fromtimestamp(math.ceil(time.time()), UTC)
        self.scheduler.add_job(
            self._guarded("ingest", ingest),
            "interval",
            seconds=cs.scrape_interval_seconds,
            id="ingest",
            next_run_time=first,
        )
        self.scheduler.add_job(
            self._guarded("inventory", self.inventory_cycle),
            "interval",
            seconds=cs.inventory_interval_seconds,
            id="inventory",
            next_run_time=first,
        )
        self.scheduler.add_job(
            self._guarded("retention", self.retention_cycle), "cron", minute=7, id="retention"
        )
        self.scheduler.start()

    def api_state(self) -> ApiState:
        return ApiState(
            store=self.store,
            targets=self.targets,
            metrics=self.metrics,
            token=self.token,
            read_requires_token=self.settings.collector.read_requires_token,
            scrape_now=self.scrape_cycle if self.query_source is None else self.query_cycle,
            retention_now=self.retention_cycle,
            ready=lambda: self._cycles > 0,
            clock=self.clock,
            routers=list(self.routers),
        )

    def stop(self) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)
        if self.inventory is not None:
            self.inventory.close()
        self.store.close()


def bind_listen(host: str, port: int, text: str) -> socket.socket:
    """The API's listening socket, bound here so that a busy or forbidden address is one
    clear line (uvicorn would log it its own way and exit 3)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {text}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


def run_collector(
    settings: Settings, extend: Callable[[CollectorService], None] | None = None
) -> int:
    """Serve until SIGTERM/SIGINT (uvicorn handles the signals), then stop cleanly.

    ``extend`` adds jobs to the service before it starts (the top-level service adds
    analytics this way, so the collector imports none of the layers above it).
    """
    import uvicorn

    host, port = parse_listen(settings.collector.listen)
    sock = bind_listen(host, port, settings.collector.listen)  # before anything starts
    service = CollectorService(settings)
    if extend is not None:
        extend(service)
    try:
        app = create_app(service.api_state())
        server = uvicorn.Server(
            uvicorn.Config(
                app, host=host, port=port, log_level="warning", access_log=False, lifespan="off"
            )
        )
        # uvicorn captures SIGTERM/SIGINT while serving and raises them again once it has
        # stopped; with these handlers in place that only ends the serve loop, and the
        # scheduler and the database are then stopped and closed cleanly below.
        stopping: list[int] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, _frame: stopping.append(signum))
        service.start_jobs()
        log.info(
            "collector serving listen=%s:%s db=%s targets=%d",
            host,
            port,
            settings.collector.db,
            len(service.targets.targets()),
        )
        server.run(sockets=[sock])
        if not server.started and not stopping:
            raise UserError(f"cannot listen on {settings.collector.listen}")
    finally:
        service.stop()
    log.info("collector stopped")
    return 0
