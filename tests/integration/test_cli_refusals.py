"""The CLI's refusals seen in issue 25, each one line on stderr and a non-zero exit, never
a traceback or a file left behind.

Seen: the collector created its database file before refusing a missing receiver secret
(``url_env`` unset); a truncated database gave ``internal error: IOException(...)``, exit 1;
a binary ``--config`` printed a 24-line traceback; a malformed ``--scenario`` printed 8
lines; in ``--prometheus-url`` mode every failed cycle logged a traceback.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.service import CollectorService
from gpuscope.collector.storage.store import Store
from gpuscope.core.errors import SourceError
from tests.integration.test_idle import END, Gpu, Work, fill

BINARY = bytes(range(256)) * 8


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCOPE_")}
    return subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
    )


def one_line(proc: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if " INFO " not in ln]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    return lines[0]


def test_collector_refuses_a_missing_receiver_secret_before_creating_its_database(
    tmp_path: Path,
) -> None:
    (tmp_path / "alerts.yaml").write_text(
        "receivers:\n  - {name: chat, type: slack, url_env: GPUSCOPE_TEST_NEVER_SET}\n"
        "route: {receiver: chat}\n"
    )
    (tmp_path / "config.yaml").write_text(
        "collector: {db: fresh.duckdb, listen: '127.0.0.1:0', kubernetes: none}\n"
        "alerts: {config_file: alerts.yaml}\n"
    )
    line = one_line(cli("collector", "--config", "config.yaml", cwd=tmp_path))
    assert "GPUSCOPE_TEST_NEVER_SET is not set" in line
    assert not list(tmp_path.glob("fresh.duckdb*"))


def test_a_truncated_database_is_one_line(tmp_path: Path) -> None:
    """The open succeeds (DuckDB reads blocks lazily); the analysis's read fails."""
    store = Store.open(tmp_path / "whole.duckdb")
    gpus = [Gpu(f"n{i}", j) for i in range(8) for j in range(8)]
    work = [Work("ml", f"p{i}", "batch", (g,)) for i, g in enumerate(gpus)]
    fill(store, gpus, work, lambda g, ts: 0.5, end=END, step=15)
    store.close()
    data = (tmp_path / "whole.duckdb").read_bytes()
    (tmp_path / "cut.duckdb").write_bytes(data[: int(len(data) * 0.9)])
    at = END.strftime("%Y-%m-%dT%H:%M:%SZ")
    line = one_line(cli("analyze", "idle", "--db", "cut.duckdb", "--at", at, cwd=tmp_path))
    assert "cannot read database cut.duckdb (damaged or truncated?)" in line


def test_a_binary_config_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.bin").write_bytes(BINARY)
    proc = cli("analyze", "idle", "--db", "x.duckdb", "--config", "config.bin", cwd=tmp_path)
    assert "is not UTF-8 text" in one_line(proc)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"nodes: [1, 2\n", "is not valid YAML at line 2"),
        (b"- a\n- b\n", "must hold a mapping"),
        (BINARY, "is not UTF-8 text"),
    ],
    ids=["broken-yaml", "a-list", "binary"],
)
def test_a_malformed_scenario_is_one_line(tmp_path: Path, content: bytes, says: str) -> None:
    (tmp_path / "scenario.yaml").write_bytes(content)
    proc = cli(
        "agent", "--gpu-source", "sim", "--scenario", "scenario.yaml", "--once", cwd=tmp_path
    )
    assert says in one_line(proc)


def test_a_failed_query_cycle_logs_one_line(caplog: pytest.LogCaptureFixture) -> None:
    """--prometheus-url mode: the query API down is the source's answer, not a bug."""
    fake = SimpleNamespace(metrics=CollectorMetrics(), on_fatal=lambda message: None)

    def cycle() -> None:
        raise SourceError("query API http://prom:9090 unreachable: connection refused")

    with caplog.at_level(logging.WARNING, logger="gpuscope.collector.service"):
        CollectorService._guarded(fake, "query", cycle)()  # type: ignore[arg-type]
    [record] = caplog.records
    assert record.exc_info is None and "unreachable" in record.getMessage()
    assert fake.metrics.job_errors.labels("query")._value.get() == 1
