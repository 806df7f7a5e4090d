"""The demo's follow-up commands run as printed: the command line it prints starts
`gpuscope` from a shell whose PATH does not hold the virtual environment."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from gpuscope.demo.run import follow_up_lines, gpuscope_command
from tests.unit.test_timefmt import AT

pytestmark = pytest.mark.integration


def test_the_demo_prints_a_time_and_commands_that_can_be_pasted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--at`` takes the printed time, and the printed command runs from a shell whose
    PATH does not hold the virtual environment (the demo run from such a shell too: with
    the venv on PATH, as scripts/test has it, the bare name is right)."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    lines = follow_up_lines(tmp_path / "g.duckdb", tmp_path, tmp_path / "s.yaml",
                            tmp_path / "r.html", AT)  # fmt: skip
    assert lines[0] == "simulated time: 2026-11-23T00:10:26Z (history ends there)"
    act = next(line for line in lines if " act --db " in line)
    assert act.split(": ", 1)[1].startswith(gpuscope_command() + " act ")
    assert act.endswith("--at 2026-11-23T00:10:26Z")
    cmd = shlex.split(gpuscope_command())
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = "/usr/bin:/bin"
    done = subprocess.run([*cmd, "analyze", "--help"], capture_output=True, text=True,
                          env=env, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "--at" in done.stdout
