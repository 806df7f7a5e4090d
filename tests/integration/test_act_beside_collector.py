"""``gpuscope act`` beside a running collector (issue 25).

Seen: DuckDB admits one writer, so the documented manual ``act`` needed the collector
stopped; each stop left a gap that made every session "unknown", so a cron-driven ``act``
postponed every action. Now ``act --collector URL`` runs inside the collector that holds
the database (POST /api/v1/act): the collector never stops, and the run's audit rows land
in its database.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscope.collector.http_api.api import create_app
from gpuscope.collector.service import CollectorService
from gpuscope.core.settings import load_settings
from gpuscope.service import add_actions
from tests.conftest import free_port
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.test_actions import node_obj, pod_obj

pytestmark = pytest.mark.integration
TOKEN = "a-test-token-that-is-long-enough-0123456789"
POLICY = {"name": "pack", "type": "consolidation", "dry_run": False, "cordon_minutes": 20}


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[str, FakeKubeApi, CollectorService, Path]]:
    """A collector (its API on loopback, the database held) over a fake cluster where
    evicting one preemptible pod frees node-c for a pending 4-GPU job."""
    import uvicorn

    api = FakeKubeApi().start()
    api.store.load(
        node_obj("node-c"),
        pod_obj("ml", "big-0", "node-c", 4, kind="batch"),
        pod_obj("ml", "small-0", "node-c", 2, kind="batch", preemptible=True),
        pod_obj("ml", "wants4-0", None, 4, kind="training"),
    )
    (tmp_path / "token").write_text(TOKEN)
    collector = {"db": str(tmp_path / "held.duckdb"), "kubernetes": api.url,
                 "api_token_file": str(tmp_path / "token")}  # fmt: skip
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"collector": collector}))
    settings = load_settings(tmp_path / "config.yaml", env={})
    service = CollectorService(settings)
    add_actions(service)
    service.inventory_cycle()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(service.api_state()), host="127.0.0.1", port=port,
                       log_level="warning", lifespan="off")
    )  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", api, service, tmp_path
    finally:
        server.should_exit = True
        thread.join(10)
        service.stop()
        api.stop()


def act(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp / "policies.yaml").write_text(yaml.safe_dump({"policies": [POLICY]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCOPE_")}
    return subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "act", "--db", str(tmp / "held.duckdb"),
         "--policy", str(tmp / "policies.yaml"), "--config", str(tmp / "config.yaml"), *args],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip


def test_act_runs_through_the_collector_that_holds_the_database(
    running: tuple[str, FakeKubeApi, CollectorService, Path],
) -> None:
    url, api, service, tmp = running
    held = act(tmp, "--execute")
    assert held.returncode == 2
    assert "--collector URL" in held.stderr  # says how to run beside it
    proc = act(tmp, "--execute", "--json", "--collector", url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    assert out["dry_run"] is False
    assert [(a["kind"], a["result"]) for a in out["actions"]] == [
        ("reserve", "done"),
        ("tolerate", "done"),
        ("evict", "done"),
    ]
    taints = api.store.get(api.store.resource("nodes"), None, "node-c")["spec"]["taints"]
    assert [t["key"] for t in taints] == ["gpuscope.io/reserved-for"]
    # the collector kept the database and went on: the audit is in it
    kinds = service.store._query("SELECT kind FROM actions ORDER BY kind")
    assert [k for (k,) in kinds] == ["evict", "reserve", "tolerate"]
    assert service.store.action_state(dry_run=False)


def test_act_through_the_collector_needs_the_token(
    running: tuple[str, FakeKubeApi, CollectorService, Path],
) -> None:
    url, api, _, tmp = running
    (tmp / "config.yaml").write_text(yaml.safe_dump({"collector": {"kubernetes": api.url}}))
    proc = act(tmp, "--collector", url)
    assert proc.returncode == 2
    assert "needs the collector's API token" in proc.stderr
