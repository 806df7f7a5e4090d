"""Issue 13: no bad target, bad value or full disk stops or corrupts ingest.

A real collector process scrapes a real agent (``gpuscope agent --gpu-source sim``) beside
hostile targets served over HTTP on loopback (bench/hostile_targets.py serves the same
cases to the benchmark); the agent's samples must keep flowing and ``/readyz`` stay 200.
"""

import base64
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest

from bench.hostile_targets import responder, serve
from gpuscope.collector.scraping.outcome import ScrapeOutcome, Target
from gpuscope.collector.scraping.scrape import Scraper
from gpuscope.collector.scraping.scrape_loop import ScrapeLoop
from tests import loopback
from tests.conftest import free_port
from tests.integration.helpers import ENV, agent_process, send, wait_http

pytestmark = pytest.mark.integration
TEXT = "text/plain; version=0.0.4; charset=utf-8"
PASSWORD = "hunter2-very-secret"
#: Runs the CLI with a file-size limit: SIGXFSZ ignored, so write() fails instead of killing.
SMALL_DISK = (
    "import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
    "n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_FSIZE, (n, n)); "
    "os.execv(sys.executable, [sys.executable, '-m', 'gpuscope.cli.main', *sys.argv[2:]])"
)


@pytest.fixture(scope="module")
def agent() -> Iterator[str]:
    with agent_process("gpu-node-08") as url:
        yield url


def collector(
    db: Path,
    targets: Sequence[str],
    *extra: str,
    env: dict[str, str] | None = None,
    file_size_limit: int | None = None,
) -> tuple[subprocess.Popen[str], str]:
    """A real ``gpuscope collector`` at a 1 s interval. ``file_size_limit``: no file the
    process writes may grow past it (a small disk: writes fail with EFBIG, as ENOSPC)."""
    port = free_port()
    cmd = [sys.executable, "-m", "gpuscope.cli.main"]
    if file_size_limit is not None:
        cmd = [sys.executable, "-c", SMALL_DISK, str(file_size_limit)]
    args = [*cmd, "collector", "--db", str(db),
            "--listen", f"127.0.0.1:{port}", "--scrape-interval", "1", "--kubernetes", "none"]  # fmt: skip
    for t in targets:
        args += ["--target", t]
    proc = subprocess.Popen(
        [*args, *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**ENV, **(env or {})},
    )
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/healthz", proc)
    return proc, base


def status(base: str) -> dict[str, Any]:
    resp = loopback.get(base + "/api/v1/status", timeout=30)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def by_url(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["url"]: t for t in st["targets"]}


def wait_for(pred: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.2)


def basic_auth_page(h: BaseHTTPRequestHandler) -> None:
    want = "Basic " + base64.b64encode(f"scraper:{PASSWORD}".encode()).decode()
    if h.headers.get("Authorization") != want:
        send(h, b"who are you?\n", "text/plain", status=401)
        return
    send(h, b"secured_up_ratio 1\n", TEXT)


def test_hostile_targets_never_stop_a_healthy_agent(tmp_path: Path, agent: str) -> None:
    """Before: a 2^62 ms timestamp failed every cycle for every target (up:false,
    scrapes:0, /readyz 503); a `# TYPE` of another target turned the agent's utilization
    into a counter; a password in a target URL leaked into the status, /metrics, logs and
    tables. Now the agent's samples keep being stored beside all of them."""
    stop = threading.Event()
    cases = (
        "timestamp_2_62",
        "type_poisoning",
        "nan_counters",
        "gzip_bomb",
        "never_finishing_body",
    )
    with (
        serve(responder("timestamp_2_62")) as ts_url,
        serve(responder("type_poisoning")) as type_url,
        serve(responder("nan_counters")) as nan_url,
        serve(responder("gzip_bomb", quick=True)) as bomb_url,
        serve(responder("never_finishing_body", stop=stop)) as hang_url,
        serve(basic_auth_page) as secret_base,
    ):
        secret_url = secret_base.replace("http://", f"http://scraper:{PASSWORD}@")
        hostile = [ts_url, type_url, nan_url, bomb_url, hang_url, secret_url]
        assert len(hostile) == len(cases) + 1
        db = tmp_path / "h.duckdb"
        proc, base = collector(db, [agent, *hostile], env={
            "GPUSCOPE_COLLECTOR__MAX_BODY_BYTES": str(8 * 2**20)})  # fmt: skip
        try:
            wait_for(lambda: by_url(status(base))[agent]["scrapes"] >= 3)
            first = status(base)
            t0 = time.monotonic()
            wait_for(lambda: by_url(status(base))[agent]["scrapes"] >= 8)
            st = status(base)
            elapsed = time.monotonic() - t0
            targets = by_url(st)
            healthy = targets[agent]
            assert healthy["up"] and healthy["last_error"] is None
            # one scrape per 1 s interval, with generous room for a loaded machine
            assert healthy["scrapes"] - by_url(first)[agent]["scrapes"] >= elapsed / 2 - 1
            assert st["samples_stored"] > first["samples_stored"]
            assert loopback.get(base + "/readyz", timeout=10).status_code == 200
            assert targets[ts_url]["up"]
            assert targets[ts_url]["samples_dropped"]["out_of_bounds"] >= 1
            assert not targets[bomb_url]["up"]
            assert targets[bomb_url]["last_reason"] == "body_size_limit"
            assert not targets[hang_url]["up"] and targets[hang_url]["last_reason"] == "timeout"
            redacted = secret_base.replace("http://", "http://scraper:xxxxx@")
            assert targets[redacted]["up"], targets[redacted]
            assert st["ingest"]["store_writable"] is True
            assert st["ingest"]["limits"]["sample_limit"] == 50_000
            metrics = loopback.get(base + "/metrics", timeout=10).text
            assert (
                f'gpuscope_collector_scrape_failures_total{{reason="timeout",target="{hang_url}"}}'
                in metrics
            )
            assert 'reason="out_of_bounds"' in metrics
            assert PASSWORD not in str(st) and PASSWORD not in metrics
            # the NaN utilization of "nan-node" is kept, but never makes the mean NaN
            util = loopback.get(base + "/api/v1/utilization", params={"step": 1}, timeout=10)
            assert util.status_code == 200 and "NaN" not in util.text
            points = [p for series in util.json()["series"] for p in series["points"]]
            assert points and all(0 <= p[1] <= 5 for p in points)
        finally:
            stop.set()
            proc.send_signal(signal.SIGTERM)
            err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 0, err
    assert PASSWORD not in err and "Traceback" not in err
    with duckdb.connect(str(db), read_only=True) as con:
        kinds = con.execute(
            "SELECT DISTINCT kind FROM series WHERE metric = 'gpuscope_gpu_utilization_ratio' "
            "AND node = 'gpu-node-08'"
        ).fetchall()
        assert kinds == [("gauge",)]
        texts = con.execute(
            "SELECT string_agg(target, ' ') FROM scrapes UNION ALL "
            "SELECT string_agg(CAST(labels AS VARCHAR), ' ') FROM series"
        ).fetchall()
        assert PASSWORD not in str(texts)
        # the NaN counter left no NaN increase and no giant jump behind
        jumps = con.execute(
            "SELECT max(value) FROM samples JOIN series USING (series_id) "
            "WHERE metric = 'evil_bytes_total'"
        ).fetchone()
        assert jumps is not None and (jumps[0] is None or jumps[0] < 10)


def test_a_never_finishing_body_does_not_delay_a_healthy_targets_pages(agent: str) -> None:
    """Before: the cycle waited for the slowest target before anything was stored. Now each
    target runs on its own schedule: every tick, the healthy page is handed to the writer
    before the hanging target's timeout outcome of that tick."""
    stop = threading.Event()
    written: list[tuple[str, float]] = []

    def write(group: Sequence[ScrapeOutcome]) -> None:
        written.extend((o.target.url, o.started_at) for o in group)

    with serve(responder("never_finishing_body", stop=stop)) as hang:
        loop = ScrapeLoop(  # a 1.8 s timeout: room for the agent on a loaded machine
            Scraper(timeout_seconds=1.8),
            lambda: [Target(agent), Target(hang)],
            write,
            2.0,
            on_fatal=lambda message: None,
            group_seconds=0.05,
        )
        loop.start()
        try:
            wait_for(lambda: sum(url == hang for url, _ in written) >= 3, timeout=60)
        finally:
            stop.set()
            loop.stop()
    hang_ticks = [ts for url, ts in written if url == hang]
    for tick in hang_ticks[:3]:
        healthy_pos = next(
            i for i, (url, ts) in enumerate(written) if url == agent and abs(ts - tick) < 1
        )
        assert healthy_pos < written.index((hang, tick))


def test_timeout_not_less_than_interval_is_refused_in_one_line(tmp_path: Path) -> None:
    """Before: a 10 s timeout was accepted with a 1 s interval."""
    res = subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "collector", "--kubernetes", "none",
         "--db", str(tmp_path / "x.duckdb"), "--scrape-interval", "1"],
        capture_output=True, text=True, timeout=60,
        env={**ENV, "GPUSCOPE_COLLECTOR__SCRAPE_TIMEOUT_SECONDS": "10"},
    )  # fmt: skip
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0
    assert "scrape_timeout_seconds" in res.stderr and "less than" in res.stderr
    assert not (tmp_path / "x.duckdb").exists()


def test_a_gzip_bomb_is_stopped_at_the_size_limit_while_it_inflates() -> None:
    """Before: each network chunk was inflated whole before the size check (1.1 GB peak for
    one bomb). Now memory stays near the limit."""
    limit = 4 * 2**20
    with serve(responder("gzip_bomb", quick=True)) as url:  # 64 MB inflated
        tracemalloc.start()
        try:
            (o,) = Scraper(max_body_bytes=limit).scrape([Target(url)])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert not o.up and o.reason == "body_size_limit"
    assert peak < 4 * limit


def test_a_full_disk_fails_readiness_then_exits_in_one_line_and_keeps_committed_data(
    tmp_path: Path, agent: str
) -> None:
    """Before: on a full volume the collector stayed up with /readyz 200, a traceback every
    second and no recovery. Now /readyz turns 503, the process exits after the bounded
    retry with one line, and a restart has every sample it had acknowledged."""
    db = tmp_path / "full.duckdb"
    limit = 4 * 2**20  # every file the process writes stops growing here (EFBIG)

    scrape = [0]

    def fat_page(h: BaseHTTPRequestHandler) -> None:  # fills the WAL in seconds, not minutes
        scrape[0] += 1
        page = "".join(f'fat_ratio{{i="{i}"}} {scrape[0] + i / 1e5}\n' for i in range(20_000))
        send(h, page.encode(), TEXT)

    with serve(fat_page) as fat:
        proc, base = collector(
            db, [agent, fat], env={"GPUSCOPE_COLLECTOR__STORE_FAILURE_EXIT_SECONDS": "4"},
            file_size_limit=limit,
        )  # fmt: skip
        seen_503, acknowledged, err = watch_until_exit(proc, base)
    assert proc.returncode == 1, err
    assert seen_503, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("gpuscope") and "refused every write" in last
    assert sum("store cannot write" in line for line in err.splitlines()) == 1
    # restarted with room: every acknowledged sample is there, and ingest goes on
    proc, base = collector(db, [agent])
    try:
        after = status(base)
        assert after["samples_stored"] >= acknowledged > 0
        wait_for(lambda: status(base)["samples_stored"] > after["samples_stored"])
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT count(*) FROM samples").fetchone()
        meta = con.execute("SELECT value FROM meta WHERE key = 'samples_stored'").fetchone()
    assert rows is not None and meta is not None and rows[0] == int(meta[0])


def watch_until_exit(proc: subprocess.Popen[str], base: str) -> tuple[bool, int, str]:
    """Poll readiness and status until the collector exits: (saw 503 after data was
    acknowledged, the most samples_stored it acknowledged, its stderr)."""
    seen_503 = False
    acknowledged = 0
    try:
        deadline = time.monotonic() + 100
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the collector never gave up on a full disk"
            try:
                ready = loopback.get(base + "/readyz", timeout=5).status_code
                st = loopback.get(base + "/api/v1/status", timeout=5).json()
            except httpx.HTTPError:
                time.sleep(0.1)
                continue
            if ready == 503 and acknowledged:
                seen_503 = True
                assert st["ingest"]["store_writable"] is False
            if st.get("samples_stored"):
                acknowledged = max(acknowledged, st["samples_stored"])
            time.sleep(0.1)
        err = proc.communicate(timeout=30)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return seen_503, acknowledged, err
