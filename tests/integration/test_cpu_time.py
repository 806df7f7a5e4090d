"""tests/cpu_time.py: ``--cpu-time=N`` sums each test file's CPU, its process's and its
children's, with and without pytest-xdist's workers.

A small suite in a folder of its own is run by a real pytest process: one file burns CPU in
the test's process, one in a child process it waits for, one almost nothing. CPU time, not
wall time, is burned and measured, so a busy machine changes nothing here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4:\n    pass\n"
FILES = {
    "test_own.py": (
        "def test_burns_here():\n" + "".join(f"    {line}\n" for line in BURN.splitlines())
    ),
    "test_child.py": (
        "import subprocess, sys\n"
        f"BURN = {BURN!r}\n"
        "def test_burns_in_a_child():\n"
        "    subprocess.run([sys.executable, '-c', BURN], check=True)\n"
    ),
    "test_idle.py": "def test_nothing():\n    assert True\n",
    "conftest.py": "from tests.cpu_time import *  # noqa: F403\n",
    # as pyproject.toml's addopts: third-party plugins that are not ours stay off
    "pytest.ini": "[pytest]\naddopts = -p no:cloudcoil -p no:schemathesis\n",
}
ROW = re.compile(r"^\s*([\d.]+)s\s+([\d.]+)s\s+([\d.]+)s\s+(\S+)", re.MULTILINE)


def run(folder: Path, *args: str) -> str:
    for name, text in FILES.items():
        (folder / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, str(folder)],
        cwd=folder, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_each_file_is_charged_its_own_and_its_childrens_cpu(
    tmp_path: Path, workers: list[str]
) -> None:
    out = run(tmp_path, "--cpu-time=2", *workers)
    assert "most CPU: 2 test files" in out, out
    rows = {m[4]: (float(m[1]), float(m[2]), float(m[3])) for m in ROW.finditer(out)}
    # the two burning files, most first; the idle one is left out of the top 2
    assert set(rows) == {"test_own.py", "test_child.py", "all"}, out
    total, own, children = rows["test_own.py"]
    assert own >= 0.35 and children < 0.1, out
    assert total == pytest.approx(own + children, abs=0.11), out  # each rounded to 0.1
    total, own, children = rows["test_child.py"]
    assert children >= 0.35 and own < 0.3, out
    assert total == pytest.approx(own + children, abs=0.11), out
    # the last row sums every file, the idle one included
    assert "all 3 files" in out, out


def test_without_the_option_nothing_is_printed(tmp_path: Path) -> None:
    assert "most CPU" not in run(tmp_path)
