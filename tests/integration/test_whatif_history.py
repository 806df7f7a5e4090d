"""``gpuscope whatif --db``: a stored week replayed under each policy, checked against
what really happened in the same rows and against the brute-force replay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuscope.analytics.placement.allocation_sources import records_from_kubectl
from gpuscope.analytics.whatif.history import read_history, what_happened
from gpuscope.collector.storage.store import Store
from tests.unit.test_placement_regressions import k8s_node, k8s_pod
from tests.unit.test_whatif import check_replay

pytestmark = pytest.mark.integration

T0 = datetime(2025, 3, 4, 8, 0, tzinfo=UTC)  # a Tuesday of 2025-W10
ISO = "%Y-%m-%dT%H:%M:%SZ"


def _snapshot(store: Store, at: datetime, pods: list[dict[str, Any]]) -> None:
    nodes = [k8s_node("a", 4), k8s_node("b", 4)]
    node_infos, pod_infos = records_from_kubectl({"items": nodes}, {"items": pods})
    store.record_inventory(at, nodes=node_infos, pods=pod_infos)


def spread_week(path: Path) -> None:
    """The real scheduler spread two 1-GPU pods over both nodes, so a 4-GPU job created an
    hour later waited until one of them ended, two hours after that."""
    created = T0.strftime(ISO)
    one = k8s_pod("one", "a", gpus=1, started=created)
    two = k8s_pod("two", "b", gpus=1, started=created)
    four_created = (T0 + timedelta(hours=1)).strftime(ISO)
    with Store.open(path) as store:
        _snapshot(store, T0, [one, two])
        _snapshot(
            store,
            T0 + timedelta(hours=1),
            [one, two, k8s_pod("four", None, gpus=4, started=four_created)],
        )
        _snapshot(
            store,
            T0 + timedelta(hours=3),
            [two, k8s_pod("four", "a", gpus=4, started=four_created)],
        )


def test_history_events_have_real_arrivals_starts_and_durations(tmp_path: Path) -> None:
    spread_week(tmp_path / "g.duckdb")
    with Store.open(tmp_path / "g.duckdb", read_only=True) as store:
        cur = store.cursor()
        start = T0 - timedelta(days=1)
        history = read_history(cur, start, start + timedelta(days=7))
    events = {e.key: e for e in history.events}
    t0 = T0.timestamp()
    assert events["team/one"].arrive == t0
    assert events["team/one"].duration == pytest.approx(3 * 3600)
    assert events["team/four"].arrive == t0 + 3600
    assert events["team/four"].duration is None  # still running when the week ends
    assert events["team/two"].duration is None
    actual = what_happened(history, t0 + 3600)
    assert actual["allocated_gpus"] == 2  # the 4-GPU job waited
    assert actual["jobs_never_started"] == 0
    # four waited two hours with four GPUs: 8 GPU-hours
    assert actual["queued_gpu_hours"] == pytest.approx(8.0)
    for policy in ("bestfit", "leastallocated", "fgd", "random"):
        check_replay(history.inventory, list(history.events), policy, drop=False)


def test_whatif_db_names_the_gpus_packing_recovers(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    spread_week(db)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscope.cli.main",
            "whatif",
            "--db",
            str(db),
            "--week",
            "2025-W10",
            "--policy",
            "bestfit",
            "leastallocated",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("GPUSCOPE_")},
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    packed, spread = out["policies"]["bestfit"], out["policies"]["leastallocated"]
    # packing starts the 4-GPU job on arrival: 6 of 8 GPUs when arrivals stop, 4 recovered
    assert packed["allocated_gpus"] == 6
    assert packed["gpus_recovered"] == 4
    assert packed["queued_gpu_hours"] == 0
    # spreading repeats what happened: the job waits two hours for a departure
    assert spread["allocated_gpus"] == 2
    assert spread["gpus_recovered"] == 0
    assert spread["queued_gpu_hours"] == pytest.approx(8.0)
    assert out["summary"]["what_happened"]["queued_gpu_hours"] == pytest.approx(8.0)
    assert out["summary"]["week"] == "2025-W10"
    assert out["summary"]["best_policy"] == "bestfit"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--week", "2025-W10"], "--week goes with --db"),
        (["--db", "DB", "--nodes", "n.json", "--pods", "p.json"], "not both"),
        (["--db", "DB", "--arrivals", "1.3"], "--arrivals applies to files"),
        (["--db", "DB", "--week", "2025-W09"], "nothing to replay"),
        (["--db", "MISSING"], "does not exist"),
        ([], "give --db PATH"),
    ],
)
def test_bad_db_input_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    db = tmp_path / "g.duckdb"
    spread_week(db)
    args = [
        str(db) if a == "DB" else str(tmp_path / "m.duckdb") if a == "MISSING" else a for a in args
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "whatif", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("GPUSCOPE_")},
    )
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert message in proc.stderr, proc.stderr
