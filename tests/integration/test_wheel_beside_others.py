"""The built wheel shares one Python environment with Segment's ``analytics-python``.

Issue 24: the wheel used to install generic top-level packages (``analytics``, ``agent``,
``collector``...). Beside ``analytics-python`` that broke the user's ``analytics.track``, and
uninstalling ``analytics-python`` deleted the shared ``analytics/__init__.py``, after which
``gpuscope analyze idle`` failed. This test builds the wheel, installs it with its
dependencies and ``analytics-python`` in a fresh venv (no system site-packages), and checks
both work, then that uninstalling either leaves the other working. It also checks the
dashboards and rules travel inside the wheel (``gpuscope dashboards export``).

The wheel's dependencies are not downloaded and unpacked again (that was 80-160 s of the
suite, most of it unpacking polars, pyarrow and duckdb): the fresh venv sees, through one
``.pth`` line, a folder of links to exactly the distributions the *built wheel's* metadata
requires with the ``server`` extra, followed transitively, taken from the environment running
the tests. A dependency missing from the wheel's metadata is therefore missing there too, and
``gpuscope`` itself is never among them, so the checks below see what a fresh install sees:
gpuscope's and analytics-python's own files in the venv's own site-packages, both uninstalled
by pip from there.

It needs a package index (``analytics-python``, hatchling); it is skipped, saying so, only
when the index cannot be reached.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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
    ``analytics-python``, the wheel's dependencies seen through the overlay (the module's
    docstring says why); skipped only when the package index is unreachable. Installed
    without compiling every module to bytecode (``--no-compile``: most of the install's CPU,
    and no part of what is checked; Python compiles what it imports)."""
    tmp = tmp_path_factory.mktemp("wheel")
    got = _run(sys.executable, "-m", "pip", "download", "--no-deps", "-d", tmp / "dl", OTHER)
    if got.returncode != 0:
        pytest.skip(f"package index unreachable (pip download {OTHER}): {got.stderr[-300:]}")
    (wheel,) = wheel_dir.glob("gpuscope-*.whl")
    env = tmp / "venv"
    _ok(sys.executable, "-m", "venv", env)
    overlay = _dependency_overlay(wheel, tmp / "deps")
    site = _ok(
        env / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"
    )
    (Path(site.strip()) / "_wheel_test_dependencies.pth").write_text(f"{overlay}\n")
    _ok(env / "bin" / "python", "-m", "pip", "install", "-q", "--no-compile",
        f"{wheel}[server]", OTHER)  # fmt: skip
    return env


def _requirements(metadata_text: str, extras: frozenset[str]) -> list[Requirement]:
    """The Requires-Dist lines of one distribution's metadata that apply here, with these extras."""
    found = []
    for line in Parser().parsestr(metadata_text).get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras | {""}):
            found.append(req)
    return found


def _dependency_overlay(wheel: Path, folder: Path) -> Path:
    """A folder of links to the distributions the built wheel requires (``server`` extra),
    followed transitively through this environment's installed metadata: each distribution's
    top-level files and its metadata folder. Fails, naming it, when a requirement is not
    installed here (then the test cannot stand in for the index)."""
    with zipfile.ZipFile(wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        todo = _requirements(zf.read(meta).decode(), frozenset({"server"}))
    here = Path(sysconfig.get_path("purelib")).resolve()
    seen: set[str] = set()
    folder.mkdir()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        dist = md.distribution(req.name)
        assert req.specifier.contains(dist.version, prereleases=True), (req, dist.version)
        for top in {f.parts[0] for f in dist.files or () if f.parts[0] != ".."}:
            source = Path(str(dist.locate_file(top))).resolve()
            if source.parent == here and not (folder / top).exists():
                (folder / top).symlink_to(source)
        todo += _requirements(dist.read_text("METADATA") or "", frozenset(req.extras))
    return folder


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
