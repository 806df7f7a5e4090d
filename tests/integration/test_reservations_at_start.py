"""A restarted collector looks at the reservations when it starts (issue 38).

Seen: an interrupted reservation (a node tainted for a pending job by a run that died
before its evictions finished) stood until the collector's next run of the policies, up to
their interval (5 minutes by default) after a restart. Now the collector's start runs the
reservations' check of the policies' run (gpuscope/actions/runner.py check_reservations)
at once. Here the policies' interval is an hour, so only the check at start can lift it;
the 120 s wait is a hang detector on a loaded machine, not a timing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscope.collector.service import CollectorService
from gpuscope.core.settings import load_settings
from gpuscope.service import add_actions
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.test_actions import TAINT, node_obj, pod_obj

pytestmark = pytest.mark.integration
POLICY = {"name": "pack", "type": "consolidation", "dry_run": False, "cordon_minutes": 20}


def _taints(api: FakeKubeApi) -> list[dict[str, Any]]:
    node = api.store.get(api.store.resource("nodes"), None, "node-c")
    return list(node.get("spec", {}).get("taints") or [])


@pytest.fixture
def restarted(tmp_path: Path) -> Iterator[tuple[FakeKubeApi, CollectorService]]:
    """A cluster whose node-c a previous collector reserved for ml/wants4-0 and died
    before its evictions finished, and a new collector (not started yet) over its database."""
    api = FakeKubeApi().start()
    until = datetime.now(UTC) + timedelta(minutes=20)
    api.store.load(
        node_obj("node-c"),
        pod_obj("ml", "big-0", "node-c", 4, kind="batch"),
        pod_obj("ml", "small-0", "node-c", 2, kind="batch", preemptible=True),
        pod_obj("ml", "wants4-0", None, 4, kind="training"),
    )
    api.store.patch(
        api.store.resource("nodes"), None, "node-c",
        {"spec": {"taints": [TAINT]},
         "metadata": {"annotations": {"gpuscope.io/reserved-for": "ml/wants4-0",
                                      "gpuscope.io/reserved-until": until.isoformat()}}},
    )  # fmt: skip
    (tmp_path / "policies.yaml").write_text(yaml.safe_dump({"policies": [POLICY]}))
    config = {
        "collector": {"db": str(tmp_path / "c.duckdb"), "kubernetes": api.url,
                      "scrape_interval_seconds": 5},
        "actions": {"policy_file": str(tmp_path / "policies.yaml"), "execute": True,
                    "interval_minutes": 60},
    }  # fmt: skip
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    service = CollectorService(load_settings(tmp_path / "config.yaml", env={}))
    service.store.save_action_state(
        [{"key": "reserve:node-c", "dry_run": False, "kind": "reserved", "due_at": until,
          "policy": "pack", "node": "node-c", "goal": "ml/wants4-0",
          "uid": "uid-ml-wants4-0", "freed": False}],
        datetime.now(UTC),
    )  # fmt: skip
    try:
        yield api, service
    finally:
        service.stop()
        api.stop()


def test_an_interrupted_reservation_is_lifted_when_the_collector_starts(
    restarted: tuple[FakeKubeApi, CollectorService],
) -> None:
    api, service = restarted
    add_actions(service)
    assert _taints(api) == [TAINT]
    service.start_jobs()
    deadline = time.monotonic() + 120
    while _taints(api) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _taints(api) == [], "the reservation still stands after the start"
    kinds = service.store._query("SELECT kind, result FROM actions")
    assert ("lift", "done") in kinds
