"""The agent as a user runs it: `gpuscope agent ...` in a real process."""

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuscope.core.catalogue import AGENT_METRICS
from tests import loopback
from tests.conftest import free_port

pytestmark = pytest.mark.integration
GPUSCOPE = [sys.executable, "-m", "gpuscope.cli.main"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUSCOPE, *args], capture_output=True, text=True, timeout=60, env=ENV)


def names_in(text: str) -> set[str]:
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_once_prints_every_metric_the_sources_give(fixtures_dir: Path) -> None:
    """sim GPUs + the real IB fixture tree: every catalogued series the sources can give is there."""
    sysfs = fixtures_dir / "infiniband-procfs" / "sys"
    res = run("agent", "--gpu-source", "sim", "--sysfs-root", str(sysfs), "--once")
    assert res.returncode == 0, res.stderr
    got = names_in(res.stdout)
    # the IB fixtures have no hw_counters saturation-free 32-bit issue etc: all families
    # but none are missing from sim GPUs + real IB
    # gpuscope_agent_errors_total appears only once something was skipped (and nothing is),
    # gpuscope_ib_port_unreadable_files only once a port's file could not be read
    skipped_only = {"gpuscope_agent_errors_total", "gpuscope_ib_port_unreadable_files"}
    expected = {m.sample_name for m in AGENT_METRICS} - skipped_only
    assert expected - got == set()
    ports = {
        (s.labels["device"], s.labels["port"])
        for fam in text_string_to_metric_families(res.stdout)
        for s in fam.samples
        if s.name == "gpuscope_ib_port_info"
    }
    assert ("mlx5_0", "1") in ports and ("mlx4_0", "2") in ports
    assert "Traceback" not in res.stderr


def test_listen_serves_the_same_over_http(fixtures_dir: Path) -> None:
    """--listen serves /metrics with the same families as --once, and /healthz reports sources."""
    port = free_port()
    sysfs = fixtures_dir / "infiniband-procfs" / "sys"
    proc = subprocess.Popen(
        [
            *GPUSCOPE,
            "agent",
            "--gpu-source",
            "sim",
            "--sysfs-root",
            str(sysfs),
            "--listen",
            f"127.0.0.1:{port}",
            "--node",
            "gpu-node-10",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                r = loopback.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
                break
            except httpx.ConnectError:
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/plain")
        once = run(
            "agent",
            "--gpu-source",
            "sim",
            "--sysfs-root",
            str(sysfs),
            "--once",
            "--node",
            "gpu-node-10",
        )
        assert names_in(r.text) == names_in(once.stdout)
        health = loopback.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()
        assert health["status"] == "ok" and health["node"] == "gpu-node-10"
        assert {s["source"] for s in health["sources"]} == {"sim", "attribution", "infiniband"}
        om = loopback.get(
            f"http://127.0.0.1:{port}/metrics",
            timeout=5,
            headers={"Accept": "application/openmetrics-text; version=1.0.0"},
        )
        assert om.text.rstrip().endswith("# EOF")
        assert loopback.get(f"http://127.0.0.1:{port}/nope", timeout=5).status_code == 404
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0  # SIGTERM is a clean stop


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu-source", "magic"], "argument --gpu-source: invalid choice: 'magic'"),
        (
            ["--gpu-source", "sim", "--sysfs-root", "/does/not/exist"],
            "--sysfs-root /does/not/exist does not exist",
        ),
        (
            ["--gpu-source", "sim", "--procfs-root", "/does/not/exist"],
            "--procfs-root /does/not/exist does not exist",
        ),
        (
            ["--gpu-source", "sim", "--listen", "nowhere"],
            "invalid setting agent.listen (from flags)",
        ),
        (
            ["--gpu-source", "sim", "--node", "not-a-node"],
            "--node not-a-node is not a node of scenario",
        ),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    """Unknown flag values and missing roots: one clear line on stderr, exit code 2."""
    res = run("agent", *args, "--once")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert message in lines[0]


def test_no_gpu_and_no_dcgm_is_a_clear_failure() -> None:
    """auto with neither DCGM nor NVML present (as on this machine) fails in one line."""
    res = run("agent", "--gpu-source", "auto", "--once")
    if res.returncode == 0:
        pytest.skip("this machine has a GPU")
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "no GPU source found" in lines[0] and "--gpu-source sim" in lines[0]


def test_agent_imports_no_collector_side_code() -> None:
    """The agent's modules load without duckdb, polars, fastapi or pyarrow (small DaemonSet image)."""
    code = (
        "import sys, gpuscope.agent.main, gpuscope.agent.build, gpuscope.agent.devices.nvml, gpuscope.agent.devices.dcgm, gpuscope.agent.devices.dcgm_exporter, "
        "gpuscope.agent.devices.infiniband, gpuscope.agent.workloads.attribution, gpuscope.agent.devices.sim; "
        "bad = {'duckdb', 'polars', 'fastapi', 'pyarrow', 'uvicorn', 'collector', 'analytics', "
        "'alerts', 'actions'} & set(sys.modules); print(sorted(bad)); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_agent_command_loads_no_collector_side_or_exposition_library() -> None:
    """`gpuscope agent` through the CLI loads neither DuckDB nor analytics (the whatif
    command's policy names are written in cli_whatif, held equal here) nor prometheus_client
    (the page is written directly): each costs the DaemonSet resident memory."""
    code = "\n".join(
        [
            "import io, sys, contextlib",
            "from gpuscope.cli.main import main",
            "out = io.StringIO()",
            "with contextlib.redirect_stdout(out):",
            "    rc = main(['agent', '--gpu-source', 'sim', '--once'])",
            "bad = {'duckdb', 'polars', 'analytics', 'collector', 'prometheus_client'}",
            "bad &= set(sys.modules)",
            "print(sorted(bad))",
            "sys.exit(1 if bad or rc or 'gpuscope_gpu_up' not in out.getvalue() else 0)",
        ]
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    from gpuscope.analytics.whatif.policies import POLICIES
    from gpuscope.cli.whatif import POLICIES as CLI_POLICIES

    assert CLI_POLICIES == POLICIES
