"""The built wheel shares one Python environment with Segment's ``analytics-python``.

Issue 24: the wheel used to install generic top-level packages (``analytics``, ``agent``,
``collector``...). Beside ``analytics-python`` that broke the user's ``analytics.track``, and
uninstalling ``analytics-python`` deleted the shared ``analytics/__init__.py``, after which
``gpuscope analyze idle`` failed. This test builds the wheel, installs it with its
dependencies and ``analytics-python`` in a fresh venv (no system site-packages), and checks
both work, then that uninstalling either leaves the other working. It also checks the
dashboards and rules travel inside the wheel (``gpuscope dashboards export``).

It needs a package index (the wheel's dependencies, ``analytics-python``, hatchling); it is
skipped, saying so, only when the index cannot be reached.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
OTHER = "analytics-python"


#: The environment the venv's commands run in: without PYTHONPATH (the development setup puts
#: the checkout there, which would shadow the installed wheel), from a folder outside it.
#: pip's check for a newer pip is one more index request per command, and answers nothing here.
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")} | {
    "PIP_DISABLE_PIP_VERSION_CHECK": "1"
}


def _run(*cmd: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          env=CLEAN_ENV, cwd=tempfile.gettempdir())  # fmt: skip


def _ok(*cmd: str | Path) -> str:
    out = _run(*cmd)
    assert out.returncode == 0, f"{cmd}: rc={out.returncode}\n{out.stdout}\n{out.stderr}"
    return out.stdout


@pytest.fixture(scope="module")
def wheel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The gpuscope wheel built once for the module: both tests read the same file (building
    it is an isolated build environment of its own each time)."""
    dist = tmp_path_factory.mktemp("dist")
    _ok(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", dist, ROOT)
    return dist


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel_dir: Path) -> Path:
    """A fresh venv holding the built gpuscope wheel (with the server extra) and
    ``analytics-python``; skipped only when the package index is unreachable. Installed
    without compiling every module to bytecode (``--no-compile``: most of the install's CPU,
    and no part of what is checked; Python compiles what it imports)."""
    tmp = tmp_path_factory.mktemp("wheel")
    got = _run(sys.executable, "-m", "pip", "download", "--no-deps", "-d", tmp / "dl", OTHER)
    if got.returncode != 0:
        pytest.skip(f"package index unreachable (pip download {OTHER}): {got.stderr[-300:]}")
    (wheel,) = wheel_dir.glob("gpuscope-*.whl")
    env = tmp / "venv"
    _ok(sys.executable, "-m", "venv", env)
    _ok(env / "bin" / "python", "-m", "pip", "install", "-q", "--no-compile",
        f"{wheel}[server]", OTHER)  # fmt: skip
    return env


def _top_level(wheel_dir: Path) -> set[str]:
    (wheel,) = wheel_dir.glob("gpuscope-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return {
            n.split("/")[0] for n in zf.namelist() if not n.split("/")[0].endswith(".dist-info")
        }


def _analytics_works(env: Path) -> None:
    """Segment's library: ``analytics.track`` exists and is its own."""
    out = _ok(env / "bin" / "python", "-c",
              "import analytics; assert callable(analytics.track); print(analytics.__file__)")  # fmt: skip
    assert out.strip().startswith(str(env)), out  # the venv's own copy, not a checkout's


def _gpuscope_works(env: Path, tmp: Path) -> None:
    """``gpuscope --help``, an analyze command over a real (empty) database, and the
    dashboards export: the package data is read through importlib.resources."""
    gpuscope = env / "bin" / "gpuscope"
    where = _ok(env / "bin" / "python", "-c", "import gpuscope; print(gpuscope.__file__)")
    assert where.strip().startswith(str(env)), where  # the wheel, not the checkout
    assert "analyze" in _ok(gpuscope, "--help")
    db = tmp / "empty.duckdb"
    if not db.exists():
        _ok(env / "bin" / "python", "-c",
            f"from gpuscope.collector.storage.store import Store; Store.open({str(db)!r}).close()")  # fmt: skip
    out = _ok(gpuscope, "analyze", "idle", "--db", db, "--at", "2026-11-16T09:00:00Z", "--json")
    assert '"idle_sessions": 0' in out  # the idle detector ran: its SQL read from the package
    exported = tmp / "export"
    _ok(gpuscope, "dashboards", "export", exported)
    for source in sorted((ROOT / "dashboards").glob("*.json")):
        assert (exported / "dashboards" / source.name).read_text() == source.read_text()
    for source in sorted((ROOT / "dashboards" / "rules").glob("*.yaml")):
        assert (exported / "rules" / source.name).read_text() == source.read_text()


def test_the_wheel_installs_only_the_gpuscope_package(wheel_dir: Path) -> None:
    assert _top_level(wheel_dir) == {"gpuscope"}


def test_both_work_side_by_side_and_after_either_is_uninstalled(venv: Path, tmp_path: Path) -> None:
    pip = (venv / "bin" / "python", "-m", "pip")
    _analytics_works(venv)
    _gpuscope_works(venv, tmp_path)
    _ok(*pip, "check")

    _ok(*pip, "uninstall", "-y", OTHER)  # gpuscope survives analytics-python's removal
    _gpuscope_works(venv, tmp_path)

    _ok(*pip, "install", "-q", "--no-compile", OTHER)
    _ok(*pip, "uninstall", "-y", "gpuscope")  # and analytics-python survives gpuscope's
    _analytics_works(venv)
    assert _run(venv / "bin" / "python", "-c", "import gpuscope").returncode != 0
