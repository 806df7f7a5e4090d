"""Real metrics engines on loopback for the fleet-mode and pull-path tests: VictoriaMetrics
(single node) with data pushed to its import API, and Prometheus started on blocks that
``promtool tsdb create-blocks-from openmetrics`` wrote (Debian packages; skipped when
absent, scripts/install-test-servers installs them)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from tests import loopback
from tests.conftest import free_port
from tests.integration.helpers import installed, served

VM_BINARY = "/usr/bin/victoria-metrics"


@contextmanager
def victoria_metrics(tmp: Path, *flags: str) -> Iterator[str]:
    """A real single-node VictoriaMetrics with its data in ``tmp``; yields its base URL.
    Its defaults stand unless ``flags`` change them (``-search.latencyOffset`` 30 s ...)."""
    binary = installed("victoria-metrics", VM_BINARY)
    port = free_port()
    argv = [
        binary,
        f"-storageDataPath={tmp / 'vm-data'}",
        f"-httpListenAddr=127.0.0.1:{port}",
        "-loggerLevel=ERROR",
        *flags,
    ]
    with served(argv, port, "/health") as base:
        yield base


def vm_flush(base: str) -> None:
    """Make what was imported searchable now (VictoriaMetrics buffers it for a second)."""
    loopback.get(base + "/internal/force_flush", timeout=60).raise_for_status()


@contextmanager
def prometheus_on_blocks(tmp: Path, openmetrics: Path, *flags: str) -> Iterator[str]:
    """A real Prometheus serving the samples of ``openmetrics`` (written as blocks into its
    data folder by promtool), scraping nothing; yields its base URL."""
    binary = installed("prometheus")
    promtool = installed("promtool")
    data = tmp / "prom-data"
    data.mkdir()
    done = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(data)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    cfg = tmp / "prometheus.yml"
    cfg.write_text(yaml.safe_dump({"global": {"scrape_interval": "15s"}, "scrape_configs": []}))
    port = free_port()
    argv = [
        binary,
        f"--config.file={cfg}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=30d",
        *flags,
    ]
    with served(argv, port, "/-/ready") as base:
        yield base
