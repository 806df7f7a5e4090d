"""Expensive runs the integration modules share: made once per test run, whichever
pytest-xdist worker asks first (the others wait on a file lock and read its result), each
module reading its own copy."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.helpers import ENV

#: The demo the integration tests read (test_demo.py, test_consistency.py): 8 nodes, two days
#: of history (the allocation check wants 40 whole hours), 20 s live (the demo's 18 s windows
#: fill).
DEMO_ARGS = ("--nodes", "8", "--days", "2", "--seconds", "20")


@dataclass(frozen=True)
class DemoRun:
    """A finished ``gpuscope demo``: its folder, exit code and output."""

    out: Path
    returncode: int
    stdout: str
    stderr: str


def _shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every worker of this test run sees (pytest-xdist's workers each have their
    own base temp folder, under one parent)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _demo_once(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """Run the demo once per test run, whichever worker asks first (the others wait on the
    lock and read its result)."""
    root = _shared_root(tmp_path_factory)
    done = root / "demo-run.json"
    with (root / "demo-run.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not done.exists():
                out = root / "demo-run"
                res = subprocess.run(
                    [sys.executable, "-m", "gpuscope.cli.main", "demo", "--out", str(out),
                     *DEMO_ARGS],
                    capture_output=True, text=True, timeout=600, env=ENV,
                )  # fmt: skip
                done.write_text(json.dumps([str(out), res.returncode, res.stdout, res.stderr]))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    out, code, stdout, stderr = json.loads(done.read_text())
    return DemoRun(Path(out), code, stdout, stderr)


def demo_copy(tmp_path_factory: pytest.TempPathFactory, into: Path) -> DemoRun:
    """The demo's folder copied to ``into`` (which must not exist), its own path replaced by
    ``into`` in its files and output: a test may write to it (run ``act`` on its database,
    the demo again) without another test seeing it."""
    run = _demo_once(tmp_path_factory)
    assert run.returncode == 0, run.stderr
    shutil.copytree(run.out, into)
    old, new = str(run.out), str(into)
    for path in into.rglob("*"):
        if path.is_file() and path.suffix in {".json", ".yaml", ".md", ".log", ".txt", ".html"}:
            text = path.read_text(encoding="utf-8")
            if old in text:
                path.write_text(text.replace(old, new), encoding="utf-8")
    return DemoRun(into, run.returncode, run.stdout.replace(old, new),
                   run.stderr.replace(old, new))  # fmt: skip
