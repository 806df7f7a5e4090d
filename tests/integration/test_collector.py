"""The collector as a user runs it: real agent processes, a real collector process, SIGKILL."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from email.utils import parsedate_to_datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gpuscope.collector.storage.store_sql import Q
from tests import loopback
from tests.conftest import free_port
from tests.integration.helpers import ENV, agent_process, http_server, send, wait_http

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration
TOKEN = "s3cret-token-for-tests-0123456789abcdef"


@pytest.fixture(scope="module")
def agents() -> Iterator[list[str]]:
    with agent_process("gpu-node-08") as a, agent_process("gpu-node-30") as b:
        yield [a, b]


@pytest.fixture(scope="module")
def html_target() -> Iterator[str]:
    def page(h: BaseHTTPRequestHandler) -> None:
        send(h, b"<html><body>Sign in</body></html>", "text/html; charset=utf-8")

    with http_server(page) as url:
        yield url + "/metrics"


def start_collector(
    db: Path, targets: list[str], *extra: str, env_extra: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "gpuscope.cli.main",
        "collector",
        "--db",
        str(db),
        "--listen",
        f"127.0.0.1:{port}",
        "--scrape-interval",
        "1",
        "--kubernetes",
        "none",
    ]
    for t in targets:
        args += ["--target", t]
    env = {**ENV, "GPUSCOPE_COLLECTOR__API_TOKEN_ENV": "TEST_TOKEN", "TEST_TOKEN": TOKEN}
    env.update(env_extra or {})
    proc = subprocess.Popen(
        [*args, *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/healthz", proc)
    return proc, base


def status(base: str) -> dict[str, Any]:
    return loopback.get(base + "/api/v1/status", timeout=10).json()


def wait_for(pred: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.2)


def test_scrapes_agents_serves_data_and_reports_html_target_down(
    tmp_path: Path, agents: list[str], html_target: str
) -> None:
    """Two agents up, the HTML target down with its reason, data through the API."""
    proc, base = start_collector(tmp_path / "c.duckdb", [*agents, html_target])
    try:
        wait_for(lambda: all(t["scrapes"] >= 2 for t in status(base)["targets"]))
        st = status(base)
        assert st["schema_version"] >= 1
        assert st["samples_stored"] > 500
        by_url = {t["url"]: t for t in st["targets"]}
        assert by_url[agents[0]]["up"] and by_url[agents[1]]["up"]
        assert by_url[html_target]["up"] is False
        assert "html" in by_url[html_target]["last_error"].lower()
        ready = loopback.get(base + "/readyz", timeout=5)
        assert ready.status_code == 200
        # one Date header, stamped per response (api_server.Dated), a real HTTP date
        [date] = ready.headers.get_list("date")
        assert abs(parsedate_to_datetime(date).timestamp() - time.time()) < 3600
        util = loopback.get(
            base + "/api/v1/utilization", params={"by": "node", "step": 1}, timeout=10
        ).json()
        assert {s["key"] for s in util["series"]} == {"gpu-node-08", "gpu-node-30"}
        busy = {s["key"]: s["points"][-1][1] for s in util["series"]}
        assert busy["gpu-node-08"] > 0.8  # the fine-tune job's node trains flat out
        resp = loopback.get(base + "/api/v1/utilization", params={"by": "project"}, timeout=10)
        assert resp.status_code == 200, resp.text + proc.stderr.read1().decode()
        by_project = resp.json()
        assert {"nlp", "serving"} <= {s["key"] for s in by_project["series"]}
        resp = loopback.get(
            base + "/api/v1/utilization", params={"by": "gpu", "limit": 5, "offset": 0}, timeout=10
        )
        assert resp.status_code == 200, resp.text
        page = resp.json()
        assert len(page["series"]) == 5 and page["total"] == 16
        assert loopback.get(base + "/api/v1/findings", timeout=5).json()["total"] == 0
        assert (
            loopback.get(
                base + "/api/v1/utilization", params={"limit": 5000}, timeout=5
            ).status_code
            == 422
        )
        metrics = loopback.get(base + "/metrics", timeout=5).text
        assert 'gpuscope_collector_target_up{target="' + html_target + '"} 0.0' in metrics
        assert "/api/v1/status" in loopback.get(base + "/openapi.json", timeout=5).json()["paths"]
        # changing endpoints need the bearer token
        assert loopback.post(base + "/api/v1/scrape", timeout=10).status_code == 401
        bad = loopback.post(
            base + "/api/v1/scrape", headers={"Authorization": "Bearer nope"}, timeout=10
        )
        assert bad.status_code == 401
        ok = loopback.post(
            base + "/api/v1/scrape", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
        )
        assert ok.status_code == 200 and ok.json()["samples_stored"] > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[1]
    assert proc.returncode == 0, out
    assert TOKEN not in out and "Traceback" not in out


def test_sigkill_loses_no_acknowledged_sample(tmp_path: Path, agents: list[str]) -> None:
    """Kill -9 mid-run: every sample samples_stored had counted is there after a restart."""
    db = tmp_path / "k.duckdb"
    proc, base = start_collector(db, agents)
    try:
        wait_for(lambda: status(base)["samples_stored"] > 2000)
        acked = status(base)["samples_stored"]
        time.sleep(0.3)  # land the kill somewhere inside the next cycles
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT count(*) FROM samples").fetchone()[0]
        # meta's count, and the cycles' counts in the writer's log it had not folded yet
        # (collector/storage/writer_log.py): what a restarted collector counts
        stored = int(
            con.execute("SELECT value FROM meta WHERE key = 'samples_stored'").fetchone()[0]
        ) + int(con.execute(Q["samples_logged"]).fetchone()[0])
        per_scrape = con.execute("SELECT DISTINCT samples FROM scrapes WHERE up").fetchall()
    assert rows >= acked
    assert rows == stored  # no half batch: the counter and the rows moved together
    assert len(per_scrape) == 1  # every scrape of these agents is whole
    proc2, base2 = start_collector(db, agents)
    try:
        after = status(base2)["samples_stored"]
        assert after >= rows
        wait_for(lambda: status(base2)["samples_stored"] > after)
    finally:
        proc2.send_signal(signal.SIGTERM)
        proc2.communicate(timeout=30)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=ENV,
    )


def test_corrupt_or_newer_database_is_one_line_and_untouched(tmp_path: Path) -> None:
    """A file that is not DuckDB, and a database from a newer gpuscope: refused, unchanged."""
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(os.urandom(4096))
    before = junk.read_bytes()
    res = run_cli("collector", "--db", str(junk), "--kubernetes", "none")
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "not a DuckDB database" in res.stderr
    assert junk.read_bytes() == before
    newer = tmp_path / "newer.duckdb"
    with duckdb.connect(str(newer)) as con:
        con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)")
        con.execute("INSERT INTO meta VALUES ('schema_version', '999')")
    res = run_cli("collector", "--db", str(newer), "--kubernetes", "none")
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "newer" in res.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "ftp://x/metrics"], "invalid setting collector.targets.0.url"),
        (["--listen", "nowhere"], "invalid setting collector.listen"),
        (["--config", "/does/not/exist.yaml"], "does not exist"),
        (["--scrape-interval", "-1"], "collector.scrape_interval_seconds"),
    ],
)
def test_bad_collector_input_is_one_line(args: list[str], message: str) -> None:
    """Bad flags and files: one line on stderr, exit code 2, nothing started."""
    res = run_cli("collector", "--kubernetes", "none", *args)
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert message in res.stderr


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("change-me-long-random-token", "is an example from the docs"),
        ("short-but-secret", "is 16 characters; at least 32 are needed"),
    ],
)
def test_a_guessable_api_token_stops_the_start(tmp_path: Path, token: str, message: str) -> None:
    """The deploy example's token, or one under 32 characters: one line, exit 2, no
    database made (the token would otherwise let anyone add silences)."""
    db = tmp_path / "t.duckdb"
    secret = tmp_path / "token"
    secret.write_text(token + "\n")  # as a mounted Secret holds it
    res = subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "collector", "--kubernetes", "none",
         "--db", str(db), "--listen", f"127.0.0.1:{free_port()}"],
        capture_output=True, text=True, timeout=60,
        env={**ENV, "GPUSCOPE_COLLECTOR__API_TOKEN_FILE": str(secret)},
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert token not in res.stderr
    assert not db.exists()


def test_a_target_that_stops_answering_is_stale_not_repeated(tmp_path: Path) -> None:
    """When an agent goes away its target turns down with the reason, and no sample of its
    series is written after that: the last values are not repeated as if fresh."""
    db = tmp_path / "s.duckdb"
    with agent_process("gpu-node-30") as url:
        proc, base = start_collector(db, [url])
        wait_for(lambda: status(base)["targets"][0]["scrapes"] >= 2)
    # the agent has stopped; wait for the collector to notice
    try:
        wait_for(lambda: status(base)["targets"][0]["up"] is False)
        first = status(base)
        target = first["targets"][0]
        assert target["consecutive_failures"] >= 1
        assert "connect" in target["last_error"]
        stored = first["samples_stored"]
        wait_for(lambda: status(base)["targets"][0]["consecutive_failures"] >= 3)
        assert status(base)["samples_stored"] == stored
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    with duckdb.connect(str(db), read_only=True) as con:
        downs = con.execute(
            "SELECT count(*) FROM scrapes WHERE NOT up AND error LIKE '%connect%'"
        ).fetchone()[0]
    assert downs >= 3


def test_a_busy_listen_address_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    """Another process on the API's port: one line, exit 2, no database file made."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = run_cli(
            "collector",
            "--kubernetes",
            "none",
            "--db",
            str(tmp_path / "b.duckdb"),
            "--listen",
            f"127.0.0.1:{port}",
        )
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"gpuscope collector: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]
    assert not (tmp_path / "b.duckdb").exists()


def test_collector_starts_with_policies_and_alerts_and_refuses_a_bad_policy(
    tmp_path: Path,
) -> None:
    """The assembled service reads actions.policy_file and alerts.config_file at start-up:
    the deployed examples start it (serving the actions and alerts endpoints); a policy
    file with a bad action stops it with one line and exit 2."""
    import yaml

    docs = yaml.safe_load_all((REPO / "deploy/collector/collector.yaml").read_text())
    data = next(d for d in docs if d and d["kind"] == "ConfigMap")["data"]
    (tmp_path / "policies.yaml").write_text(data["policies.yaml"])
    (tmp_path / "alerts.yaml").write_text(data["alerts.yaml"])
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump({
            "actions": {"policy_file": str(tmp_path / "policies.yaml")},
            "alerts": {"config_file": str(tmp_path / "alerts.yaml")},
        })
    )  # fmt: skip
    secrets = {"SLACK_WEBHOOK_URL": "http://127.0.0.1:9/slack", "PD_ROUTING_KEY": "k" * 32}
    proc, base = start_collector(
        tmp_path / "a.duckdb", [], "--config", str(config), env_extra=secrets
    )
    try:
        assert loopback.get(base + "/api/v1/actions", timeout=10).json()["total"] == 0
        assert loopback.get(base + "/api/v1/alerts", timeout=10).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    (tmp_path / "policies.yaml").write_text(
        "policies: [{name: bad, type: idle, action: explode}]\n"
    )
    config.write_text(
        yaml.safe_dump({
            "actions": {"policy_file": str(tmp_path / "policies.yaml")},
            "alerts": {"enabled": False},
        })
    )  # fmt: skip
    res = run_cli("collector", "--kubernetes", "none", "--db", str(tmp_path / "b.duckdb"),
                  "--config", str(config), "--listen", "127.0.0.1:0")  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "policies[bad].action" in res.stderr
