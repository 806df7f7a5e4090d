"""Regressions of issue 26, "Blind and unbounded": the query source shows in
``/api/v1/status``, ``/metrics`` and ``gpuscope collector --check`` (URL redacted, last
success, last error, lag, steps skipped, query time and bytes per cycle); a failed cycle is
one log line, no traceback; SIGTERM is not held up by a pull in flight."""

from __future__ import annotations

import json
import logging
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from bench.fleet_sim import push_to_victoriametrics
from gpuscope.collector.http_api.api import create_app
from gpuscope.collector.service import CollectorService
from gpuscope.core.errors import ConfigError
from gpuscope.core.settings import Settings
from tests.conftest import free_port
from tests.integration.engines import victoria_metrics, vm_flush
from tests.integration.fleet_cluster import SimRun, sim_run
from tests.integration.helpers import ENV
from tests.integration.test_query_source_defects import hanging_engine

pytestmark = pytest.mark.integration

SECRET = "pw-very-secret-4711"


def service(tmp: Path, url: str, now: float, **query: object) -> CollectorService:
    settings = Settings.model_validate({
        "collector": {
            "db": str(tmp / "c.duckdb"), "kubernetes": "none", "prometheus_url": url,
            "query": {"retries": 0, "timeout_seconds": 30, **query},
        }
    })  # fmt: skip
    return CollectorService(settings, clock=lambda: now)


def test_status_and_metrics_show_the_query_source(tmp_path: Path) -> None:
    run = sim_run(nodes=6, minutes=10, hours_ago=2)
    with victoria_metrics(tmp_path, "-search.disableCache") as vm:
        push_to_victoriametrics(vm, run.pages(), run.times())
        vm_flush(vm)
        url = vm.replace("http://", f"http://scraper:{SECRET}@")
        svc = service(tmp_path, url, run.end - 60, mode="pull", max_lag_steps=8)
        try:
            stored = svc.query_cycle()
            app = TestClient(create_app(svc.api_state()))
            status = app.get("/api/v1/status").json()
            metrics = app.get("/metrics").text
        finally:
            svc.stop()
    assert stored > 0
    q = status["ingest"]["query_source"]
    assert SECRET not in json.dumps(status) and SECRET not in metrics
    assert q["url"].startswith("http://scraper:xxxxx@")
    assert q["mode"] == "pull" and q["last_error"] is None and q["last_success"]
    assert q["lag_seconds"] is not None and q["lag_seconds"] < 120
    # a fresh collector starts at the newest step: nothing skipped
    assert q["steps_skipped"] == 0
    cycle = q["last_cycle"]
    assert cycle["queries"] >= 1 and cycle["bytes"] > 1000 and cycle["query_seconds"] > 0
    assert cycle["samples"] == stored
    for name in ("gpuscope_collector_query_lag_seconds", "gpuscope_collector_query_cycle_bytes",
                 "gpuscope_collector_query_steps_skipped_total",
                 "gpuscope_collector_query_last_success_timestamp_seconds"):  # fmt: skip
        assert name in metrics


def test_steps_too_far_behind_are_skipped_and_shown(tmp_path: Path) -> None:
    """A collector far behind (down for hours) skips what is past ``max_lag_steps`` and
    says so, instead of a catch-up query that cannot pass."""
    run = sim_run(nodes=6, minutes=10, hours_ago=2)
    with victoria_metrics(tmp_path, "-search.disableCache") as vm:
        push_to_victoriametrics(vm, run.pages(), run.times())
        vm_flush(vm)
        svc = service(tmp_path, vm, run.end, mode="pull", max_lag_steps=8)
        assert svc.query_source is not None
        svc.query_source.pull_window.cursor = run.start  # 38 steps behind
        try:
            svc.query_cycle()
            q = svc.ingest_status()["query_source"]
        finally:
            svc.stop()
    assert q["steps_skipped"] == 38 - 8 + 1
    assert q["last_cycle"]["steps"] == 8


def test_a_failed_cycle_is_one_line_without_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"http://scraper:{SECRET}@127.0.0.1:{free_port()}"
    svc = service(tmp_path, url, 1_800_000_000.0)
    try:
        with caplog.at_level(logging.INFO):
            for _ in range(3):
                assert svc.query_cycle() == 0
        q = svc.ingest_status()["query_source"]
    finally:
        svc.stop()
    assert all(r.exc_info is None for r in caplog.records), "a traceback was logged"
    failed = [r for r in caplog.records if "query cycle failed" in r.getMessage()]
    assert len(failed) == 3 and all("\n" not in r.getMessage() for r in failed)
    assert SECRET not in caplog.text
    assert "unreachable" in q["last_error"] and SECRET not in q["last_error"]
    assert q["failed_cycles"] == 3 and q["last_success"] is None


def test_collector_check_prints_the_query_source(tmp_path: Path) -> None:
    newest = math.floor(time.time() / 15) * 15 - 15
    sim = sim_run(nodes=6)
    run = SimRun(sim.cluster, sim.origin, newest - 285, 5)  # five minutes up to now
    with victoria_metrics(tmp_path) as vm:
        push_to_victoriametrics(vm, run.pages(), run.times())
        vm_flush(vm)
        url = vm.replace("http://", f"http://u:{SECRET}@")
        done = subprocess.run(
            [sys.executable, "-m", "gpuscope.cli.main", "collector", "--check",
             "--prometheus-url", url, "--db", str(tmp_path / "c.duckdb"),
             "--kubernetes", "none"],
            capture_output=True, text=True, env=ENV, timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert SECRET not in done.stdout and shown["url"].startswith("http://u:xxxxx@")
    assert shown["agents"] == 6 and shown["mode"] == "fleet"
    assert shown["lag_seconds"] is not None and shown["bytes"] > 0
    bad = subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "collector", "--check",
         "--prometheus-url", f"http://127.0.0.1:{free_port()}",
         "--db", str(tmp_path / "c.duckdb"), "--kubernetes", "none"],
        capture_output=True, text=True, env=ENV, timeout=300,
    )  # fmt: skip
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_sigterm_is_not_held_up_by_a_pull_in_flight(tmp_path: Path) -> None:
    """Was: SIGTERM waited minutes for an in-flight pull. The query in flight is
    abandoned (the engine stops it too) and the collector exits cleanly."""
    with hanging_engine() as (base, requests, _):
        cfg = tmp_path / "c.yaml"
        cfg.write_text(yaml.safe_dump({"collector": {
            "prometheus_url": base, "db": str(tmp_path / "c.duckdb"), "kubernetes": "none",
            "listen": f"127.0.0.1:{free_port()}",
            "query": {"mode": "pull", "timeout_seconds": 300, "retries": 0},
        }}))  # fmt: skip
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuscope.cli.main", "collector", "--config", str(cfg)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while not requests:
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, "the collector never asked"
                time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)  # the query alone would take 300 s
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_pulled_series_obey_the_series_limit(tmp_path: Path) -> None:
    """Was: pulled data skipped the series limits. A query source's batches now pass the
    same budgets as a scraped page: past ``collector.max_series`` new series are dropped
    and counted, the store's series stay bounded."""
    run = sim_run(nodes=6, minutes=10, hours_ago=2)
    with victoria_metrics(tmp_path, "-search.disableCache") as vm:
        push_to_victoriametrics(vm, run.pages(), run.times())
        vm_flush(vm)
        settings = Settings.model_validate({"collector": {
            "db": str(tmp_path / "c.duckdb"), "kubernetes": "none", "prometheus_url": vm,
            "max_series": 500, "query": {"mode": "pull", "retries": 0},
        }})  # fmt: skip
        svc = CollectorService(settings, clock=lambda: run.end - 60)
        try:
            stored = svc.query_cycle()
            metrics = TestClient(create_app(svc.api_state())).get("/metrics").text
            cur = svc.store.cursor()
            series = cur.execute("SELECT count(*) FROM series").fetchone()
            cur.close()
        finally:
            svc.stop()
    assert stored > 0 and series is not None and series[0] == 500
    dropped = [line for line in metrics.splitlines()
               if line.startswith("gpuscope_collector_samples_dropped_total")
               and 'reason="series_limit"' in line]  # fmt: skip
    assert dropped and float(dropped[0].rsplit(" ", 1)[1]) > 1000


def test_fleet_summaries_take_the_gpu_link_floors_from_the_analytics_settings(
    tmp_path: Path,
) -> None:
    """The collector asks hot GPU links over half the smallest capacity it runs with, and
    refuses a ``gpu_link_hot_ratio`` under that share (hot links would not be stored)."""
    from gpuscope.collector.querying.fleet_summaries import HOT_LINK_FLOOR

    def settings(hot: float) -> Settings:
        return Settings.model_validate({
            "collector": {
                "db": str(tmp_path / f"c{hot}.duckdb"), "kubernetes": "none",
                "prometheus_url": "http://127.0.0.1:9", "query": {"summaries": True},
            },
            "analytics": {"gpu_link_hot_ratio": hot,
                          "nvlink_bytes_per_second": {"B200": 900e9, "H100": 450e9}},
        })  # fmt: skip

    svc = CollectorService(settings(0.8), clock=lambda: 0.0)
    try:
        assert svc.query_source is not None
        floors = svc.query_source.fleet.link_floors or {}
        assert floors["gpuscope_gpu_nvlink_bytes_total"] == HOT_LINK_FLOOR * 450e9
    finally:
        svc.store.close()
    with pytest.raises(ConfigError, match="gpu_link_hot_ratio"):
        CollectorService(settings(HOT_LINK_FLOOR / 2), clock=lambda: 0.0)
