"""schemathesis over the collector's OpenAPI document (issue 25): generated requests to
every operation, with and without the token, must never answer 5xx, and every status code
answered must be one the document declares. Through ASGI (no sockets), with few examples
per operation, so the whole file stays near a minute on CI. schemathesis and hypothesis are
imported where they run, not when the suite is collected (a second in every worker).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from gpuscope.alerts.api import alerts_router
from gpuscope.alerts.config import AlertsConfig
from gpuscope.alerts.engine import AlertsEngine
from gpuscope.analytics.api import analytics_router
from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.http_api.api import ApiState, create_app
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings
from gpuscope.service_whatif import whatif_on_store

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
TOKEN = "tok"


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp: Path = tmp_path_factory.mktemp("schema")
    store = Store.open(tmp / "api.duckdb")
    clock = NOW.timestamp
    engine = AlertsEngine(store, AlertsConfig.model_validate({}), clock=clock)
    reports = tmp / "reports"
    reports.mkdir()
    state = ApiState(
        store=store,
        targets=TargetRegistry(),
        metrics=CollectorMetrics(),
        token=TOKEN,
        read_requires_token=True,
        clock=clock,
        routers=[
            partial(alerts_router, store, engine, clock),
            analytics_router(store, Settings(), clock),  # the CLI's analyze and report
        ],
        scrape_now=lambda: 0,
        retention_now=dict,
        reports_dir=reports,
        whatif=whatif_on_store(store, Settings(), clock),
    )
    import schemathesis

    yield schemathesis.openapi.from_asgi("/openapi.json", create_app(state))
    engine.close()
    store.close()


def fuzz(schema: Any, headers: dict[str, str]) -> list[str]:
    """Every operation, a few generated cases each; the failures, one line each."""
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20  # the whole API, the alerts router's included
    for op in operations:
        failures.extend(fuzz_one(op, headers))
    return failures


def fuzz_one(op: Any, headers: dict[str, str]) -> list[str]:
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import status_code_conformance

    checks = (not_a_server_error, status_code_conformance)
    failures: list[str] = []

    @given(case=op.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    def run(case: Any) -> None:
        response = case.call(headers=headers)
        try:
            case.validate_response(response, checks=checks)
        except (Exception, BaseExceptionGroup) as exc:  # collected, reported together
            line = " ".join(str(exc).split())[:300]
            failures.append(f"{op.method.upper()} {op.path} -> {response.status_code}: {line}")

    run()
    return failures


#: Generated cases per operation and token mode: ~30 operations x 2 x this.
EXAMPLES = 8


def test_with_the_token(api_schema: Any) -> None:
    failures = fuzz(api_schema, {"Authorization": f"Bearer {TOKEN}"})
    assert not failures, "\n".join(sorted(set(failures)))


def test_without_the_token(api_schema: Any) -> None:
    failures = fuzz(api_schema, {})
    assert not failures, "\n".join(sorted(set(failures)))
