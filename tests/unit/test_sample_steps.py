"""The step rule (gpuscope.analytics.detectors.sample_steps) in the bandwidth queries."""

from __future__ import annotations

from gpuscope.analytics.detectors.bandwidth import Q
from gpuscope.analytics.detectors.sample_steps import STEP_S, with_steps


def test_the_fragment_is_substituted() -> None:
    assert with_steps("SELECT {step_s} AS dt") == f"SELECT {STEP_S} AS dt"


def test_every_query_taking_a_rate_from_steps_uses_the_rule_and_defines_its_gauges() -> None:
    users = {name for name, sql in Q.items() if STEP_S in sql}
    assert users == {"port_stats", "gpu_link_stats", "port_history"}
    for name in users:
        assert "gauge_series AS (" in Q[name], name
    for name, sql in Q.items():
        assert "{step_s}" not in sql, name
        assert "lag(ts)" not in sql.replace(STEP_S, ""), name  # no second copy of the rule
