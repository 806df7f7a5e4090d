"""``gpuscope whatif`` on files: the JSON it prints, and bad input refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.paths import FIXTURES
from tests.unit.test_placement_regressions import k8s_node, k8s_pod

pytestmark = pytest.mark.integration

CSV = FIXTURES / "alibaba-gpu-v2023" / "csv"


def gpuscope(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "whatif", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith("GPUSCOPE_")},
    )


def write(tmp_path: Path, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[str]:
    n, p = tmp_path / "nodes.json", tmp_path / "pods.json"
    n.write_text(json.dumps({"kind": "List", "items": nodes}))
    p.write_text(json.dumps({"kind": "List", "items": pods}))
    return ["--nodes", str(n), "--pods", str(p)]


def test_packing_starts_the_4_gpu_job_that_spreading_blocks(tmp_path: Path) -> None:
    nodes = [k8s_node("a", 4), k8s_node("b", 4)]
    pods = [
        k8s_pod("one", "a", gpus=1, started="2024-12-31T00:00:00Z"),
        k8s_pod("two", "b", gpus=1, started="2024-12-31T00:01:00Z"),
        k8s_pod("four", None, gpus=4, started="2024-12-31T00:02:00Z"),
    ]
    args = write(tmp_path, nodes, pods)
    proc = gpuscope(tmp_path, *args, "--policy", "bestfit", "leastallocated", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out["policies"]) == {"bestfit", "leastallocated"}
    packed, spread = out["policies"]["bestfit"], out["policies"]["leastallocated"]
    assert packed["allocation_ratio"] == pytest.approx(6 / 8)
    assert packed["jobs_never_started"] == 0
    assert spread["allocation_ratio"] == pytest.approx(2 / 8)
    assert spread["unallocated_gpus"] == pytest.approx(6)
    assert spread["jobs_never_started"] == 1
    assert spread["headroom_jobs"]["4"] == 0
    assert out["summary"]["best_policy"] == "bestfit"
    assert out["summary"]["capacity_gpus"] == 8


def test_the_capacity_what_if_of_files_runs_under_the_configured_policy(tmp_path: Path) -> None:
    """On files the capacity what-if replays under ``analytics.whatif_policy``: spreading
    (the default) leaves the 4-GPU job waiting and one more node starts it; packing
    (configured) starts it on the cluster as it was."""
    nodes = [k8s_node("a", 4), k8s_node("b", 4)]
    pods = [
        k8s_pod("one", "a", gpus=1, started="2024-12-31T00:00:00Z"),
        k8s_pod("two", "b", gpus=1, started="2024-12-31T00:01:00Z"),
        k8s_pod("four", None, gpus=4, started="2024-12-31T00:02:00Z"),
    ]
    args = [*write(tmp_path, nodes, pods), "--policy", "leastallocated", "--json"]
    proc = gpuscope(tmp_path, *args, "--add-nodes", "Tesla-T4:1")
    assert proc.returncode == 0, proc.stderr
    cap = json.loads(proc.stdout)["capacity"]
    assert cap["policy"] == "leastallocated"
    assert cap["baseline"]["jobs_never_started"] == 1
    assert cap["changed"]["jobs_never_started"] == 0
    config = tmp_path / "gpuscope.yaml"
    config.write_text("analytics:\n  whatif_policy: mostallocated\n")
    proc = gpuscope(tmp_path, *args, "--add-nodes", "Tesla-T4:1", "--config", str(config))
    assert proc.returncode == 0, proc.stderr
    cap = json.loads(proc.stdout)["capacity"]
    assert cap["policy"] == "mostallocated"
    assert cap["baseline"]["jobs_never_started"] == 0


def test_the_trace_replays_to_the_arrival_share() -> None:
    proc = gpuscope(
        CSV,
        "--nodes",
        "openb_node_list_gpu_node.csv",
        "--pods",
        "openb_pod_list_default.csv",
        "--arrivals",
        "0.2",
        "--policy",
        "bestfit",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["summary"]["capacity_gpus"] == 6212
    assert out["summary"]["arrived_gpus"] >= 0.2 * 6212
    # at 20 % of capacity every task fits: allocation is what arrived
    assert out["policies"]["bestfit"]["allocation_ratio"] == pytest.approx(
        out["summary"]["arrived_gpus"] / 6212, abs=1e-4
    )


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "does not exist"),
        ("folder", "is a folder"),
        ("not-json", "is not kubectl JSON"),
        ("no-gpu-nodes", "no schedulable node has a GPU"),
        ("bad-policy", "invalid choice"),
        ("bad-arrivals", "expected a number"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, case: str, message: str) -> None:
    args = write(tmp_path, [k8s_node("a", 2)], [k8s_pod("p", None, gpus=1)])
    if case == "missing":
        args[1] = str(tmp_path / "nope.json")
    elif case == "folder":
        args[3] = str(tmp_path)
    elif case == "not-json":
        Path(args[1]).write_text("{not json")
    elif case == "no-gpu-nodes":
        args = write(tmp_path, [k8s_node("a", 0)], [k8s_pod("p", None, gpus=1)])
    elif case == "bad-policy":
        args += ["--policy", "firstfit"]
    elif case == "bad-arrivals":
        args += ["--arrivals", "nan"]
    proc = gpuscope(tmp_path, *args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert message in proc.stderr, proc.stderr
