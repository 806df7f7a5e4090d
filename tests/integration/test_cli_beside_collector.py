"""``analyze``, ``report weekly`` and ``whatif --db`` beside a running collector (issue 25).

Seen: DuckDB lets one process open a file, so on the database a running collector holds
``gpuscope analyze`` was refused ("analyse a copy, or use the API"), as were ``report
weekly`` and ``whatif --db``; stopping the collector for them left a gap in its data. Now
the CLI finds the database held, checks that the collector its settings name holds that very
file, and runs the command inside it (GET /api/v1/analyze, /api/v1/report/weekly,
/api/v1/whatif). Here a real collector process scrapes a real agent every second while the
three commands run against its database; each prints what a local run on a copy of the
database prints, and the collector's scrapes go on without a lost tick.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscope.collector.service import CollectorService
from gpuscope.collector.storage.store import Store
from tests.fakes.kube_api import FakeKubeApi
from tests.integration import report_week
from tests.integration.helpers import agent_process
from tests.integration.test_act_beside_collector import act, running  # noqa: F401 (fixture)
from tests.integration.test_collector import TOKEN, start_collector, status, wait_for
from tests.integration.test_collector_ticks import accounted
from tests.integration.test_idle import MIN, T0, Gpu, Work, fill

#: One test runs eight CLI commands beside a live collector: 47-55 s on a quiet 2-core
#: machine, past the suite's 120 s per test under two busy loops on a slower one
#: (2026-12-07, scripts/test-under-load: timed out in its last wait, every check before it
#: passed); its own waits stay bounded (wait_for's timeouts).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(360)]

AGENT_NODE = "gpu-node-08"
#: The idle notebook's history: busy until 10:20, then 1 % until 11:00 (test_idle's answer).
NOTEBOOK = Work("alice", "jupyter-alice", "interactive", (Gpu("node-a", 0),))
AT = (T0 + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
#: Keep every stored row: the history is older than the default retention.
KEEP = {
    "GPUSCOPE_COLLECTOR__RAW_RETENTION_DAYS": "36500",
    "GPUSCOPE_COLLECTOR__ROLLUP_5M_RETENTION_DAYS": "36500",
}


def cli(*args: str, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCOPE_")}
    env.update({**KEEP, "TEST_TOKEN": TOKEN})
    extra = ["--config", str(config)] if config else []
    return subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", *args, *extra],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def agent_target(base: str) -> dict[str, Any]:
    (target,) = status(base)["targets"]
    return dict(target)


def test_analyze_report_and_whatif_run_beside_a_live_collector(tmp_path: Path) -> None:
    held = tmp_path / "held.duckdb"
    report_week.build(held)  # 2025-W10 and W09: the report's and the what-if's week
    with Store.open(held) as store:  # the idle notebook, at test_idle's times
        fill(store, NOTEBOOK.gpus, [NOTEBOOK], lambda g, ts: 0.6 if ts <= T0 + 20 * MIN else 0.01)
    copy = tmp_path / "copy.duckdb"
    shutil.copy(held, copy)  # what a local run reads: the same history, no collector

    with agent_process(AGENT_NODE) as agent:
        proc, base = start_collector(held, [agent], env_extra=KEEP)
        try:
            port = base.rsplit(":", 1)[1]
            config = tmp_path / "config.yaml"
            config.write_text(
                yaml.safe_dump(
                    {"collector": {"listen": f"127.0.0.1:{port}", "api_token_env": "TEST_TOKEN"}}
                )
            )
            wait_for(lambda: agent_target(base)["scrapes"] >= 3, timeout=120)
            before = agent_target(base)
            scrapes = [before["scrapes"]]

            # analyze idle: the idle notebook, as a local run on the copy finds it
            got = json.loads(ok(cli("analyze", "idle", "--db", str(held), "--at", AT, "--json",
                                    config=config)))  # fmt: skip
            scrapes.append(agent_target(base)["scrapes"])
            (finding,) = got["findings"]
            assert finding["kind"] == "idle_session"
            assert finding["subject"] == {"namespace": "alice", "pod": "jupyter-alice",
                                          "container": "main"}  # fmt: skip
            assert finding["since"] == "2026-03-02T10:20:00Z"
            assert finding["evidence"]["gpu_hours_wasted"] == pytest.approx(0.6667)
            assert got["summary"]["idle_sessions"] == 1
            local = json.loads(ok(cli("analyze", "idle", "--db", str(copy), "--at", AT, "--json")))
            assert got == local
            text = ok(cli("analyze", "idle", "--db", str(held), "--at", AT, config=config))
            assert "idle_session" in text and "pod=jupyter-alice" in text
            assert text == ok(cli("analyze", "idle", "--db", str(copy), "--at", AT))

            # report weekly: the week's files written here, the numbers a local run gives
            out, local_out = tmp_path / "reports", tmp_path / "local-reports"
            rep = json.loads(ok(cli("report", "weekly", "--db", str(held), "--week", "2025-W10",
                                    "--out", str(out), "--json", config=config)))  # fmt: skip
            scrapes.append(agent_target(base)["scrapes"])
            mine = json.loads(ok(cli("report", "weekly", "--db", str(copy), "--week", "2025-W10",
                                     "--out", str(local_out), "--json")))  # fmt: skip
            week = out / "2025-W10"
            assert rep["directory"] == str(week) and rep["week"] == "2025-W10"
            # (sums over the held file may add in another order: equal to float precision)
            assert rep["cluster"] == {
                k: {c: pytest.approx(v) for c, v in row.items()}
                for k, row in mine["cluster"].items()
            }
            assert rep["notes"] == mine["notes"]
            assert rep["cluster"]["allocated_gpu_hours"]["this_week"] == pytest.approx(636)
            assert rep["summary"] == mine["summary"].replace(str(local_out), str(out))
            assert f"Report: {week / 'report.html'}" in rep["summary"]
            assert (week / "summary.md").read_text() == rep["summary"]
            ours = sorted(p.relative_to(week) for p in week.rglob("*") if p.is_file())
            theirs = sorted(p.relative_to(local_out / "2025-W10")
                            for p in (local_out / "2025-W10").rglob("*") if p.is_file())  # fmt: skip
            assert ours == theirs and Path("tables/cluster.csv") in ours
            rows = (week / "tables/cluster.csv").read_text().splitlines()
            assert len(rows) == len(
                (local_out / "2025-W10/tables/cluster.csv").read_text().splitlines()
            )
            assert rows[0].startswith("metric,") and any(
                r.startswith("allocated_gpu_hours,") for r in rows
            )
            assert "<html" in (week / "report.html").read_text()[:2000].lower()

            # whatif --db: the stored week replayed, as a local replay of the copy
            args = ["--week", "2025-W10", "--policy", "bestfit", "fgd", "--seeds", "2", "--json",
                    "--capacity-search"]  # fmt: skip
            wi = json.loads(ok(cli("whatif", "--db", str(held), *args, config=config)))
            scrapes.append(agent_target(base)["scrapes"])
            assert wi == json.loads(ok(cli("whatif", "--db", str(copy), *args)))
            assert sorted(wi["policies"]) == ["bestfit", "fgd"]
            assert wi["summary"]["week"] == "2025-W10" and wi["summary"]["source"] == "database"
            assert wi["summary"]["seeds"] == 2 and "what_happened" in wi["summary"]
            assert wi["capacity"]["policy"] == "leastallocated" and "search" in wi["capacity"]

            # act (a dry run: this collector has no Kubernetes API): run in the collector,
            # its audit rows written there
            policy = tmp_path / "policies.yaml"
            policy.write_text(yaml.safe_dump({"policies": [
                {"name": "idle-notebooks", "type": "idle", "dry_run": True},
            ]}))  # fmt: skip
            run = json.loads(ok(cli("act", "--db", str(held), "--policy", str(policy), "--json",
                                    config=config)))  # fmt: skip
            scrapes.append(agent_target(base)["scrapes"])
            assert run["dry_run"] is True and run["refused_or_failed"] == 0
            assert isinstance(run["actions"], list) and isinstance(run["notes"], list)

            # the collector never stopped: same process, every tick since its first scrape
            # a scrape or a skip, and its scrapes went on while the commands ran
            wait_for(lambda: agent_target(base)["scrapes"] > scrapes[-1], timeout=120)
            after = agent_target(base)
            assert proc.poll() is None
            assert after["first_tick"] == before["first_tick"]
            ticks, seen = accounted(after, 1.0)
            assert seen == ticks, after
            assert scrapes == sorted(scrapes) and after["scrapes"] > before["scrapes"]
        finally:
            proc.terminate()
            proc.wait(30)
    # and every scrape it counted is in the database it held, with the agent's samples
    with Store.open(held, read_only=True) as store:
        ((stored, up),) = store._query(
            "SELECT count(*), count(*) FILTER (up) FROM scrapes WHERE target = ?", [agent]
        )
        ((n,),) = store._query(
            "SELECT count(*) FROM series WHERE node = ? AND last_seen > ?",
            [AGENT_NODE, datetime(2026, 1, 1)],
        )
    assert stored >= after["scrapes"] and up >= after["scrapes"] - after["failures"]
    assert n > 0


def test_a_held_database_with_no_collector_answering_says_how_to_reach_one(
    tmp_path: Path,
) -> None:
    """A database another process holds, with no collector at the settings' address:
    one line that names the way (--collector URL), exit 2, nothing written."""
    held = tmp_path / "held.duckdb"
    Store.open(held).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
         "print('held', flush=True); time.sleep(600)", str(held)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump({"collector": {"listen": "127.0.0.1:9"}}))
        proc = cli("analyze", "idle", "--db", str(held), config=config)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "in use by another process" in proc.stderr and "--collector URL" in proc.stderr


def test_act_on_a_held_database_runs_in_the_collector_that_holds_it(
    running: tuple[str, FakeKubeApi, CollectorService, Path],  # noqa: F811 (the fixture)
) -> None:
    """A cron ``act --execute`` written before ``--collector`` existed: the collector its
    settings name holds the database, so the run goes there, and the collector keeps it."""
    url, api, service, tmp = running
    config = yaml.safe_load((tmp / "config.yaml").read_text())
    config["collector"]["listen"] = url.removeprefix("http://")
    (tmp / "config.yaml").write_text(yaml.safe_dump(config))
    proc = act(tmp, "--execute", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert [(a["kind"], a["result"]) for a in out["actions"]] == [
        ("reserve", "done"),
        ("tolerate", "done"),
        ("evict", "done"),
    ]
    kinds = service.store._query("SELECT kind FROM actions ORDER BY kind")
    assert [k for (k,) in kinds] == ["evict", "reserve", "tolerate"]
    taints = api.store.get(api.store.resource("nodes"), None, "node-c")["spec"]["taints"]
    assert [t["key"] for t in taints] == ["gpuscope.io/reserved-for"]


def test_a_collector_holding_another_database_is_not_used(
    running: tuple[str, FakeKubeApi, CollectorService, Path],  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    """The settings name a collector, but it holds another file than the held --db: its
    data must not stand in for this database's. One line, exit 2, naming both."""
    url, _, _, tmp = running
    other = tmp_path / "other.duckdb"
    Store.open(other).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
         "print('held', flush=True); time.sleep(600)", str(other)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        config = yaml.safe_load((tmp / "config.yaml").read_text())
        config["collector"]["listen"] = url.removeprefix("http://")
        (tmp / "config.yaml").write_text(yaml.safe_dump(config))
        proc = cli("analyze", "idle", "--db", str(other), config=tmp / "config.yaml")
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert str((tmp / "held.duckdb").resolve()) in proc.stderr
    assert "--collector URL" in proc.stderr and not proc.stdout
