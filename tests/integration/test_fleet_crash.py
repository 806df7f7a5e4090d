"""Issue 40, "A crash in the middle of a cycle stores buckets twice": a real collector
process in fleet mode against a real VictoriaMetrics, SIGKILLed at points of its cycle
drawn at random (in the middle of its shards' queries, while other shards' buckets are
being committed), restarted on the same file each time: in the end every 5-minute bucket
of every series is stored exactly once, none lost, none twice.

Was: the shards' cursors were saved only at the end of a cycle, the samples batch by
batch before that, so a restarted collector asked again for buckets it had committed and
stored them a second time. Now each bucket's batch and its shard's cursor are one
transaction.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pytest
import yaml

from bench.fleet_sim import push_to_victoriametrics
from gpuscope.collector.querying.query_ingest import CURSOR_KEY
from gpuscope.collector.storage.schema import SET_META
from gpuscope.collector.storage.store import Store
from tests import loopback
from tests.conftest import free_port
from tests.integration.engines import victoria_metrics, vm_flush
from tests.integration.fleet_cluster import BUCKET_S, SimRun, sim_run
from tests.integration.helpers import ENV, http_server, send

pytestmark = pytest.mark.integration

SHARDS = 3
#: The seed of the kill points (another seed: other points; any must pass).
SEED = int(os.environ.get("GPUSCOPE_CRASH_SEED", "40"))


class Killer:
    """A proxy before the engine that SIGKILLs the collector when it sends its
    ``kill_at``-th query of the process (that query is never answered)."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.pid = 0
        self.kill_at = 0
        self.seen = 0
        self.killed = threading.Event()
        self._lock = threading.Lock()

    def arm(self, pid: int, kill_at: int) -> None:
        with self._lock:
            self.pid, self.kill_at, self.seen = pid, kill_at, 0
            self.killed.clear()

    def respond(self, handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
        with self._lock:
            self.seen += 1
            if self.seen == self.kill_at:
                os.kill(self.pid, signal.SIGKILL)
                self.killed.set()
                return
        r = loopback.post(
            self.engine + handler.path,
            content=body,
            headers={"Content-Type": handler.headers.get("Content-Type", "")},
            timeout=120,
        )
        send(handler, r.content, r.headers.get("Content-Type", "application/json"), r.status_code)


@contextmanager
def killing_proxy(engine: str) -> Iterator[tuple[str, Killer]]:
    killer = Killer(engine)
    with http_server(killer.respond) as base:
        yield base, killer


def recent_run() -> SimRun:
    """Some 25 minutes of the demo's cluster up to now, on the 5-minute grid."""
    sim = sim_run(nodes=6)
    newest = math.floor(time.time() / 15) * 15 - 15
    start = math.floor((newest - 25 * 60) / BUCKET_S) * BUCKET_S
    return SimRun(sim.cluster, sim.origin, start, int((newest - start) // 60))


def seed_cursors(db: Path, at: float) -> None:
    """The file a collector down since ``at`` left: every shard's window at ``at``, so the
    first cycle after the start asks several buckets of every shard."""
    value = json.dumps({"mode": "fleet", "step": float(BUCKET_S), "shards": SHARDS,
                        "cursors": {str(s): at for s in range(SHARDS)}})  # fmt: skip
    with Store.open(db) as store:
        cur = store.cursor()
        cur.execute(SET_META, [CURSOR_KEY, value])
        cur.close()


def collector(cfg: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpuscope.cli.main", "collector", "--config", str(cfg)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip


def cycles_done(api: str) -> int:
    try:
        status = loopback.get(api + "/api/v1/status", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return 0
    return int(status["ingest"]["query_source"]["cycles"])


def run_until_killed_or_done(cfg: Path, api: str, killer: Killer, kill_at: int) -> bool:
    """One collector process: killed at its ``kill_at``-th query (True), or its first
    cycle done before that (then stopped with SIGTERM; False)."""
    proc = collector(cfg)
    killer.arm(proc.pid, kill_at)
    try:
        deadline = time.monotonic() + 300
        while True:
            if killer.killed.is_set():
                proc.wait(timeout=60)
                assert proc.returncode == -signal.SIGKILL
                return True
            assert proc.poll() is None, proc.communicate()[1]
            if cycles_done(api) >= 1:
                proc.send_signal(signal.SIGTERM)
                _, err = proc.communicate(timeout=120)
                assert proc.returncode == 0, err
                return False
            assert time.monotonic() < deadline, "the collector neither asked nor finished"
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigkill_at_random_points_of_a_cycle_neither_repeats_nor_loses_a_bucket(
    tmp_path: Path,
) -> None:
    run = recent_run()
    rng = random.Random(SEED)
    # a cycle here is 1 + 3 shards x 7 questions = 22 queries: one point early (before any
    # bucket is stored), two where some shards' buckets are committed and others' not
    points = [rng.randint(2, 8), rng.randint(9, 15), rng.randint(16, 22)]
    rng.shuffle(points)
    with victoria_metrics(tmp_path, "-search.disableCache") as vm:
        assert push_to_victoriametrics(vm, run.pages(), run.times()) > 0
        vm_flush(vm)
        db = tmp_path / "c.duckdb"
        seed_cursors(db, run.start)
        with killing_proxy(vm) as (proxy, killer):
            port = free_port()
            api = f"http://127.0.0.1:{port}"
            cfg = tmp_path / "c.yaml"
            cfg.write_text(yaml.safe_dump({"collector": {
                "prometheus_url": proxy, "db": str(db), "kubernetes": "none",
                "listen": f"127.0.0.1:{port}",
                "query": {"mode": "fleet", "shards": SHARDS, "retries": 0,
                          "timeout_seconds": 60, "interval_seconds": 3600,
                          "concurrency": 2},
            }}))  # fmt: skip
            kills = [run_until_killed_or_done(cfg, api, killer, k) for k in points]
            assert any(kills), f"no kill landed (points {points}, seed {SEED})"
            # the last start runs its cycle to the end
            assert not run_until_killed_or_done(cfg, api, killer, 10_000)
    newest_at_start = math.floor((run.end - BUCKET_S - 30) / BUCKET_S) * BUCKET_S
    with Store.open(db, read_only=True) as store:
        cur = store.cursor()
        twice = cur.execute(
            "SELECT count(*) FROM (SELECT series_id, ts FROM samples GROUP BY ALL "
            "HAVING count(*) > 1)"
        ).fetchone()
        times = [
            r[0].replace(tzinfo=UTC).timestamp()
            for r in cur.execute("SELECT DISTINCT ts FROM samples ORDER BY 1").fetchall()
        ]
        per_gpu = cur.execute(
            """SELECT count(*) FROM samples JOIN series USING (series_id)
               WHERE metric = 'gpuscope_gpu_utilization_ratio' GROUP BY series_id"""
        ).fetchall()
        cur.close()
    where = f"(kill points {points}, seed {SEED})"
    assert twice == (0,), f"buckets stored twice {where}"
    # every bucket from the saved window on, each at its last second, none missing
    assert times and times[0] == run.start + BUCKET_S - 1, where
    assert times == [times[0] + k * BUCKET_S for k in range(len(times))], f"a gap {where}"
    assert times[-1] >= newest_at_start + BUCKET_S - 1, f"buckets lost at the end {where}"
    assert per_gpu and {n for (n,) in per_gpu} == {len(times)}, where
