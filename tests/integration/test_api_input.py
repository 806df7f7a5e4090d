"""Hostile input to the collector's HTTP API, sent over real HTTP to the app under uvicorn.

Each request here answered 500 (or hung, or took all memory) before: it must now be a 4xx
with a JSON ``detail``, and the API must keep answering afterwards.
"""

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import httpx
import pytest

from gpuscope.alerts.api import alerts_router
from gpuscope.alerts.engine import AlertsEngine
from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.http_api.api import ApiState, create_app
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store
from gpuscope.core.records import Finding, finding_id
from tests import loopback
from tests.conftest import free_port
from tests.integration.alert_receivers import FakeTime, receiver

pytestmark = pytest.mark.integration
NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
AUTH = {"Authorization": "Bearer tok"}


@dataclass
class Served:
    url: str
    store: Store
    engine: AlertsEngine
    time: FakeTime
    slack: object


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """The collector's app with the alerts router on loopback, one idle alert waiting."""
    import uvicorn

    from gpuscope.alerts.config import AlertsConfig

    ft = FakeTime(NOW.timestamp())
    store = Store.open(tmp_path / "api.duckdb")
    subject = {"namespace": "a" * 40 + "!", "pod": "nb-0", "container": "main"}
    store.record_findings(
        [
            Finding(finding_id("idle_session", subject), "idle_session", "warning", subject,
                    NOW - timedelta(minutes=45), NOW, {"gpus_held": 1, "idle_minutes": 45})
        ],
        NOW,
        kinds=["idle_session"],
    )  # fmt: skip
    with receiver() as slack:
        config = AlertsConfig.model_validate(
            {"receivers": [{"name": "slack", "type": "slack", "url": slack.url + "/hook",
                            "min_interval_seconds": 0}],
             "route": {"receiver": "slack"}}
        )  # fmt: skip
        engine = AlertsEngine(store, config, clock=ft.clock, sleep=ft.sleep)
        state = ApiState(
            store=store, targets=TargetRegistry(), metrics=CollectorMetrics(), token="tok",
            clock=ft.clock, routers=[partial(alerts_router, store, engine, ft.clock)],
            scrape_now=lambda: 0,
        )  # fmt: skip
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(create_app(state), host="127.0.0.1", port=port,
                           log_level="warning", lifespan="off")
        )  # fmt: skip
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.02)
        try:
            yield Served(f"http://127.0.0.1:{port}", store, engine, ft, slack)
        finally:
            server.should_exit = True
            thread.join(10)
            engine.close()
            store.close()


def _json_4xx(r: httpx.Response, status: int) -> str:
    """The response is ``status`` with a JSON detail; returns the detail as text."""
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    return str(r.json()["detail"])


def test_non_ascii_authorization_is_401_not_500(served: Served) -> None:
    """An unauthenticated caller's header with bytes past ASCII is a plain 401."""
    for value in (b"Bearer \xc3\xa9t\xc3\xa9", b"Bearer \xff\xfe", "Bearer tök".encode()):
        r = loopback.post(f"{served.url}/api/v1/scrape", headers={"Authorization": value})
        assert "bearer token" in _json_4xx(r, 401)
    assert loopback.post(f"{served.url}/api/v1/scrape", headers=AUTH).status_code == 200


PAGED = ["/api/v1/findings", "/api/v1/inventory/nodes", "/api/v1/actions", "/api/v1/utilization",
         "/api/v1/alerts", "/api/v1/alerts/deliveries", "/api/v1/reports"]  # fmt: skip


def test_huge_and_negative_offsets_are_422(served: Served) -> None:
    """Past 10**9 (DuckDB binds offsets as 64-bit integers) or below 0: 422, on every list."""
    for path in PAGED:
        for offset in (10**30, 2**63, 1_000_000_001, -1):
            r = loopback.get(f"{served.url}{path}", params={"offset": offset})
            assert "offset" in _json_4xx(r, 422), (path, offset)


def test_offset_at_the_bound_still_answers(served: Served) -> None:
    r = loopback.get(f"{served.url}/api/v1/findings", params={"offset": 1_000_000_000})
    assert r.status_code == 200 and r.json()["items"] == []


def test_unusable_steps_are_4xx(served: Served) -> None:
    """Infinite, NaN, longer than a year, or so short the answer has too many points."""
    for step in ("inf", "-inf", "nan", "1e300", "31622401"):
        r = loopback.get(f"{served.url}/api/v1/utilization", params={"step": step})
        assert "step" in str(_json_4xx(r, 422)), step
    r = loopback.get(f"{served.url}/api/v1/utilization", params={"step": "1e-300"})
    assert "raise step" in _json_4xx(r, 400)


BAD_TIMES: list[dict[str, str]] = [
    {"start": "1e20"},
    {"start": "inf"},
    {"start": "nan"},
    {"end": "-1e20"},
    {"end": "1e20"},
    {"start": "0001-01-01T00:00:00Z"},
    {"end": "0001-01-01T00:00:00Z"},
    {"end": "1970-01-01T00:10:00Z"},  # the default start (end - 1h) is before 1970
    {"start": "9999-12-31T23:59:59Z", "end": "inf"},
]


def test_times_out_of_range_are_400(served: Served) -> None:
    """Outside 1970 .. 9999 (Python's datetime and DuckDB's epoch arithmetic): 400."""
    for params in BAD_TIMES:
        r = loopback.get(f"{served.url}/api/v1/utilization", params=params)
        detail = _json_4xx(r, 400)
        assert "time" in detail or "start" in detail, params


def test_far_but_valid_times_still_answer(served: Served) -> None:
    """The window's edges are accepted: a long step keeps the point count small."""
    r = loopback.get(
        f"{served.url}/api/v1/utilization",
        params={"start": "1970-01-01T00:00:00Z", "end": "9999-12-31T00:00:00Z",
                "step": 366 * 86400},
    )  # fmt: skip
    assert r.status_code == 200, r.text


def test_silence_durations_past_the_limit_are_400(served: Served) -> None:
    """10**20 hours overflowed timedelta (500); every duration past 90 days is refused."""
    for duration in ("100000000000000000000h", "9999999999999999w", "91d"):
        body = {"matchers": ['namespace="cv"'], "duration": duration}
        r = loopback.post(f"{served.url}/api/v1/silences", json=body, headers=AUTH)
        assert "at most 90 days" in _json_4xx(r, 400), duration


def test_silence_ending_after_year_9999_is_400(served: Served) -> None:
    body = {"matchers": ['a="b"'], "starts_at": "9999-12-31T23:00:00Z", "duration": "2h"}
    r = loopback.post(f"{served.url}/api/v1/silences", json=body, headers=AUTH)
    assert "9999" in _json_4xx(r, 400)


def test_silence_bodies_are_capped(served: Served) -> None:
    """A declared and a chunked (undeclared) body over 64 KiB are 413; memory never holds it."""
    big = {"matchers": ['a="b"'], "duration": "1h", "comment": "x" * 10_000_000}
    r = loopback.post(f"{served.url}/api/v1/silences", json=big, headers=AUTH)
    assert "larger than" in _json_4xx(r, 413)

    def chunks() -> Iterator[bytes]:
        yield b'{"matchers": ["a=b"], "duration": "1h", "comment": "'
        for _ in range(200):
            yield b"x" * 65536
        yield b'"}'

    r = loopback.post(f"{served.url}/api/v1/silences", content=chunks(),
                   headers={**AUTH, "Content-Type": "application/json"})  # fmt: skip
    assert "larger than" in _json_4xx(r, 413)
    many = {"matchers": ['a="b"'] * 65, "duration": "1h"}
    r = loopback.post(f"{served.url}/api/v1/silences", json=many, headers=AUTH)
    _json_4xx(r, 422)
    long = {"matchers": ['a="' + "b" * 2000 + '"'], "duration": "1h"}
    r = loopback.post(f"{served.url}/api/v1/silences", json=long, headers=AUTH)
    _json_4xx(r, 422)
    # the API still answers, and a small silence still goes in
    ok = loopback.post(f"{served.url}/api/v1/silences", json={"matchers": ['a="b"'],
                    "duration": "1h"}, headers=AUTH)  # fmt: skip
    assert ok.status_code == 201


def test_bad_content_length_is_400(served: Served) -> None:
    """A Content-Length that is not a number is refused before the body is read."""
    with socket.create_connection(("127.0.0.1", int(served.url.rsplit(":", 1)[1])), 5) as s:
        s.sendall(b"POST /api/v1/silences HTTP/1.1\r\nHost: x\r\nContent-Length: 12abc\r\n\r\n")
        head = s.recv(4096)
    assert head.split(b"\r\n", 1)[0].split()[1][:1] == b"4"


@pytest.mark.timeout(60, method="signal")  # interrupts a backtracking match (sre checks)
def test_backtracking_regex_silence_cannot_stall_the_alerts_job(served: Served) -> None:
    """`(a+)+$` against a label of 40 "a"s and a "!" takes 2**40 steps with a backtracking
    engine; silences match on RE2, so the alerts job finishes at once and the alert goes out.
    """
    body = {"matchers": ['namespace=~"(a+)+$"'], "duration": "2h"}
    r = loopback.post(f"{served.url}/api/v1/silences", json=body, headers=AUTH)
    assert r.status_code == 201, r.text
    served.engine.run()  # in this thread, so that the timeout's signal can stop a stuck match
    assert len(served.slack.requests) == 1  # type: ignore[attr-defined]  # not silenced


def test_regexes_re2_cannot_run_in_linear_time_are_400(served: Served) -> None:
    """Backreferences, look-around and huge repetitions have no linear-time match: 400."""
    for regex in (r"(a)\\1", "(?=a)b", "(?<!x)y", "a{1000}{1000}"):
        body = {"matchers": [f'namespace=~"{regex}"'], "duration": "1h"}
        r = loopback.post(f"{served.url}/api/v1/silences", json=body, headers=AUTH)
        assert "bad regular expression" in _json_4xx(r, 400), regex
