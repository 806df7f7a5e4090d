"""Our alerts reach a real Alertmanager (API v2) which forwards them to a local webhook,
firing and then resolved, with our labels and annotations intact."""

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuscope.alerts.config import AlertsConfig
from gpuscope.alerts.engine import AlertsEngine
from gpuscope.collector.storage.store import Store
from gpuscope.core.records import Finding, finding_id
from tests import loopback
from tests.integration.alert_receivers import (
    FakeTime,
    alertmanager_server,
    receiver,
    wait_for,
)

pytestmark = pytest.mark.integration


def _finding(at: datetime) -> Finding:
    subject = {"node": "n7", "device": "mlx5_3", "port": "1"}
    return Finding(finding_id("link_errors", subject), "link_errors", "critical", subject, at,
                   at, {"increase_by_type": {"symbol_error": 12}})  # fmt: skip


def test_alerts_reach_a_real_alertmanager_and_its_webhook(tmp_path: Path) -> None:
    # the real clock: Alertmanager compares endsAt with its own time
    now = datetime.now(UTC).replace(microsecond=0)
    ft = FakeTime(now.timestamp())
    store = Store.open(tmp_path / "am.duckdb")
    with receiver() as hook, alertmanager_server(tmp_path, hook.url + "/am") as am:
        config = AlertsConfig.model_validate({
            "receivers": [{"name": "site-am", "type": "alertmanager", "url": am}],
            "route": {"receiver": "site-am"},
        })  # fmt: skip
        engine = AlertsEngine(store, config, clock=ft.clock, sleep=ft.sleep)
        store.record_findings([_finding(now)], now, kinds=["link_errors"])
        result = engine.run()
        assert [o.ok for o in result.outcomes] == [True]
        listed = loopback.get(f"{am}/api/v2/alerts").json()
        assert [a["labels"]["alertname"] for a in listed] == ["InfinibandLinkErrors"]
        assert listed[0]["status"]["state"] == "active"

        wait_for(lambda: any(b["status"] == "firing" for b in hook.bodies()))
        firing = next(b for b in hook.bodies() if b["status"] == "firing")
        (alert,) = firing["alerts"]
        assert alert["labels"] == {"alertname": "InfinibandLinkErrors", "kind": "link_errors",
                                   "severity": "critical", "node": "n7", "device": "mlx5_3",
                                   "port": "1"}  # fmt: skip
        assert alert["annotations"]["summary"].startswith("n7 mlx5_3/1 is logging errors")
        assert hook.requests[0]["path"] == "/am"

        time.sleep(1.1)  # a resolve must end after it began, by Alertmanager's own clock
        later = datetime.now(UTC)
        ft.now = later.timestamp()
        store.record_findings([], later, kinds=["link_errors"])  # the errors stopped
        engine.run()
        wait_for(lambda: any(b["status"] == "resolved" for b in hook.bodies()))
        resolved = next(b for b in hook.bodies() if b["status"] == "resolved")
        assert resolved["alerts"][0]["labels"]["node"] == "n7"
        engine.close()
    store.close()
