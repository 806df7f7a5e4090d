"""`gpuscope agent` through the command's entry point loads only what the agent uses
(issue 24, a lean agent), and still answers every mistake in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
#: what the `gpuscope` console script runs (pyproject.toml: gpuscope.cli.entry:main)
GPUSCOPE = [sys.executable, "-m", "gpuscope.cli"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPUSCOPE, *args], capture_output=True, text=True, timeout=60,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def fresh_interpreter(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by a new interpreter: what it imports is what its path imports."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def test_a_real_node_agent_loads_no_pydantic_yaml_or_kubernetes(tmp_path: Path) -> None:
    """A node agent without pod metadata from the API server (a GPU source stood in for
    NVML, which this machine lacks) runs without pydantic, PyYAML, the Kubernetes client, the
    JSON log formatter or the rest of the command line."""
    code = "\n".join(
        [
            "import io, sys, contextlib",
            "import gpuscope.agent.build as build",
            "class Gpus:",
            "    name = 'nvml'",
            "    def read(self): return []",
            "    def close(self): return None",
            "build._gpu_source = lambda settings: Gpus()",
            "from gpuscope.cli.entry import main",
            "out = io.StringIO()",
            "with contextlib.redirect_stdout(out):",
            f"    rc = main(['agent', '--sysfs-root', {str(tmp_path)!r}, "
            f"'--procfs-root', {str(tmp_path)!r}, '--once'])",
            "heavy = {'pydantic', 'yaml', 'kubernetes', 'pythonjsonlogger', 'prometheus_client',",
            "         'gpuscope.core.settings', 'gpuscope.cli.main', 'gpuscope.sim'}",
            "print(sorted(heavy & set(sys.modules)))",
            "sys.exit(1 if rc or heavy & set(sys.modules) or 'gpuscope_agent_info' not in "
            "out.getvalue() else 0)",
        ]
    )
    env = {**os.environ, "GPUSCOPE_AGENT__POD_METADATA": "none"}
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_sim_agent_loads_no_pydantic_and_prints_its_page() -> None:
    """The simulated agent needs the simulator (its records are plain dataclasses), not
    pydantic, the settings model, the steady-state loop or the CLI."""
    code = "\n".join(
        [
            "import io, sys, contextlib",
            "from gpuscope.cli.entry import main",
            "out = io.StringIO()",
            "with contextlib.redirect_stdout(out):",
            "    rc = main(['agent', '--gpu-source', 'sim', '--node', 'gpu-node-30', '--once'])",
            "heavy = {'pydantic', 'yaml', 'kubernetes', 'pythonjsonlogger', 'gpuscope.core.settings',",
            "         'gpuscope.cli.main', 'gpuscope.sim.steady'}",
            "print(sorted(heavy & set(sys.modules)))",
            "sys.exit(1 if rc or heavy & set(sys.modules) or 'gpu-node-30' not in out.getvalue() "
            "else 0)",
        ]
    )
    res = fresh_interpreter(code)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize(
    ("args", "env", "config", "message"),
    [
        ([], {"GPUSCOPE_AGENT__SOURCE_TIMEOUT_SECONDS": "soon"}, None,
         "gpuscope agent: invalid setting agent.source_timeout_seconds (from environment)"),
        ([], {}, "agent:\n  colour: blue\n", "gpuscope agent: unknown setting agent.colour"),
        ([], {}, "agent: [1\n", "is not valid YAML at line"),
        (["--listen", "nowhere"], {}, None, "invalid setting agent.listen (from flags)"),
        (["--node", "not-a-node"], {}, None, "--node not-a-node is not a node of scenario"),
        (["--bogus"], {}, None, "gpuscope agent: error: unrecognized arguments: --bogus"),
        (["--gpu-source", "magic"], {}, None, "argument --gpu-source: invalid choice"),
        ([], {"GPUSCOPE_LOG_LEVEL": "LOUD"}, None, "GPUSCOPE_LOG_LEVEL='LOUD'"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_a_non_zero_exit(
    tmp_path: Path, args: list[str], env: dict[str, str], config: str | None, message: str
) -> None:
    """Bad flags, environment and config files: one clear line on stderr, exit code 2."""
    extra = []
    if config is not None:
        (tmp_path / "c.yaml").write_text(config)
        extra = ["--config", str(tmp_path / "c.yaml")]
    res = run("agent", "--gpu-source", "sim", *args, *extra, "--once", env=env)
    assert res.returncode == 2, res.stdout[-500:] + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert message in lines[0]
    assert res.stdout == ""


def formatter_after(args: list[str]) -> str:
    """The class of the log formatter ``gpuscope ARGS`` set up, in a fresh process."""
    code = (
        "import io, contextlib, logging\n"
        "from gpuscope.cli.entry import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    rc = main({args!r})\n"
        "print(rc, type(logging.getLogger().handlers[0].formatter).__name__)"
    )
    res = fresh_interpreter(code)
    return res.stdout.strip()


def test_log_format_before_the_command_and_from_the_settings(tmp_path: Path) -> None:
    """`--log-format json` may come before `agent`, as for every command; unset, the
    logging.format setting decides; a bad one is the full parser's one line."""
    sim = ["agent", "--gpu-source", "sim", "--once"]
    assert formatter_after(["--log-format", "json", *sim]) == "0 _Json"
    assert formatter_after(["--log-format=json", *sim]) == "0 _Json"
    assert formatter_after(sim) == "0 Formatter"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("logging:\n  format: json\n")
    assert formatter_after([*sim, "--config", str(cfg)]) == "0 _Json"
    res = run("--log-format", "json", "agent", "--gpu-source", "sim", "--node", "x", "--once")
    assert res.returncode == 2 and res.stderr.startswith("gpuscope agent: --node x")
    res = run("--log-format", "xml", "agent", "--once")
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "invalid choice: 'xml'" in res.stderr


def test_agent_help_loads_no_settings_model() -> None:
    """Issue 24 saw `gpuscope agent --help` spend ~1.3 s importing the settings' pydantic
    models; through the entry point it imports the agent's options alone."""
    code = (
        "import sys, io, contextlib\n"
        "from gpuscope.cli.entry import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    try:\n"
        "        main(['agent', '--help'])\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0\n"
        "heavy = {'pydantic', 'yaml', 'gpuscope.core.settings', 'gpuscope.cli.main',\n"
        "         'gpuscope.agent.serving.exposition', 'gpuscope.sim'} & set(sys.modules)\n"
        "print(sorted(heavy))\n"
        "sys.exit(1 if heavy or '--gpu-source' not in out.getvalue() else 0)"
    )
    res = fresh_interpreter(code)
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_simulated_node_loads_no_pydantic() -> None:
    """Building a node's share of the default scenario (the sim agent's path) loads none of
    pydantic's machinery (about 20 MiB of the agent's memory)."""
    code = (
        "import sys\n"
        "from gpuscope.sim import SimulatedCluster\n"
        "from gpuscope.sim.one_node import default_node_scenario\n"
        "_, s = default_node_scenario('gpu-node-30', 42)\n"
        "assert SimulatedCluster(s).gpu_readings('gpu-node-30', 22000.0)\n"
        "sys.exit(1 if 'pydantic' in sys.modules else 0)"
    )
    res = fresh_interpreter(code)
    assert res.returncode == 0, res.stdout + res.stderr
