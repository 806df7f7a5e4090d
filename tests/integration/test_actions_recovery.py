"""A reservation that cannot stall (issue 25), against the fake API server.

Seen: after a SIGKILL at the first eviction, the next runs (kill switch on or off) said "a
consolidation is in flight", exited 0 without an alert, neither evicted nor lifted, and
the pending job waited for the 20-minute deadline. And the reservation taint outlived the
bind until the next executing run, closing the node's other free GPUs meanwhile.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from gpuscope.actions.runner import lift_when_bound
from gpuscope.core.settings import Settings
from tests.integration.test_actions import (  # noqa: F401  (fixtures)
    AT,
    STEP,
    TAINT,
    Cluster,
    cluster,
    consolidation_policy,
    packed,
    plant_reservation,
    results,
    taints,
)


class Notices:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    def notify(self, notice: Any) -> bool:
        self.sent.append(notice)
        return True


@pytest.mark.parametrize("kill_switch", [False, True], ids=["acting", "kill-switch"])
@pytest.mark.parametrize("state", [True, False], ids=["with-state", "crash-before-state"])
def test_a_consolidation_a_crash_interrupted_is_lifted_in_the_next_run_with_an_alert(
    packed: Cluster,  # noqa: F811
    state: bool,
    kill_switch: bool,
) -> None:
    plant_reservation(packed, AT + timedelta(minutes=20), state=state, freed=False)
    notices = Notices()
    run = packed.run(
        [consolidation_policy()],
        execute=True,
        at=AT + timedelta(minutes=1),
        notifier=notices,
        kill_switch=kill_switch,
    )
    lift = run.records[0]
    assert (lift.kind, lift.node, lift.result, lift.dry_run) == ("lift", "node-c", "done", False)
    assert "interrupted" in lift.message or "interrupted" in lift.reason
    [alert] = notices.sent
    assert alert.labels["node"] == "node-c" and "interrupted" in alert.text
    assert not any("in flight" in n for n in run.notes)
    # the same run plans afresh: the job does not wait for the deadline
    again = [(r.kind, r.result) for r in run.records[1:]]
    if kill_switch:
        assert again == [("reserve", "would-do"), ("tolerate", "would-do"), ("evict", "would-do")]
        assert taints(packed, "node-c") == []
    else:
        assert again == [("reserve", "done"), ("tolerate", "done"), ("evict", "done")]
        assert taints(packed, "node-c") == [TAINT] and packed.going("ml", "small-0")


def test_a_finished_consolidation_is_left_in_flight(packed: Cluster) -> None:  # noqa: F811
    """The counterpart: a reservation whose evictions all landed waits for the bind."""
    policy = consolidation_policy()
    packed.run([policy], execute=True)
    again = packed.run([policy], execute=True, at=AT + timedelta(minutes=1))
    assert results(again) == [] and any("in flight" in n for n in again.notes)


def settings_for(c: Cluster) -> Settings:
    return Settings.model_validate(
        {"collector": {"kubernetes": c.api.url, "scrape_interval_seconds": STEP}}
    )


def test_the_taint_is_lifted_as_soon_as_the_inventory_sees_the_bind(
    packed: Cluster,  # noqa: F811
) -> None:
    from gpuscope.actions.kube import ClusterClient

    policy = consolidation_policy()
    packed.run([policy], execute=True)
    assert taints(packed, "node-c") == [TAINT]
    client = ClusterClient(packed.api.url, request_timeout_seconds=2.0)
    try:
        at: datetime = AT + timedelta(minutes=1)
        packed.api.requests.clear()
        # the job still pends: nothing is sent
        assert (
            lift_when_bound(packed.store, [policy], settings_for(packed), client=client, at=at)
            == []
        )
        assert packed.api.requests == []
        # the scheduler binds it and the collector's inventory watch records it
        api = packed.api
        api.store.patch(
            api.store.resource("pods"), "ml", "wants4-0", {"spec": {"nodeName": "node-c"}}
        )
        packed.sync()
        recs = lift_when_bound(packed.store, [policy], settings_for(packed), client=client, at=at)
    finally:
        client.close()
    assert [(r.kind, r.node, r.result) for r in recs] == [("lift", "node-c", "done")]
    assert taints(packed, "node-c") == []
