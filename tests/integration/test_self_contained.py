"""The repository stands alone: nothing it tracks points at a folder beside the checkout.

A fresh clone with nothing beside it must pass its tests, so reference data lives in
tests/fixtures and the design contract in docs/design.md. The patterns are assembled here so
that this file does not match itself.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: A path that leaves the repository for the old workspace folder, and the way Python code
#: built it (the parent folder joined with shared, then data).
OUTSIDE = (b".." + b"/shared", b'"shared"' + b' / "data"')


def _files() -> list[str]:
    """Every tracked file, and every new file git would add (so a test catches it before a
    commit does)."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    return [name for name in out.decode().split("\0") if name]


def test_no_file_names_a_path_outside_the_repository() -> None:
    files = _files()
    assert "docs/design.md" in files
    offenders = []
    for name in files:
        path = REPO / name
        if not path.is_file():  # deleted in the working tree, not yet committed
            continue
        data = path.read_bytes()
        offenders += [f"{name}: {p.decode()}" for p in OUTSIDE if p in data]
    assert offenders == []


def test_every_fixture_folder_says_where_its_data_comes_from() -> None:
    fixtures = REPO / "tests" / "fixtures"
    folders = [p for p in fixtures.iterdir() if p.is_dir()]
    assert folders
    missing = [p.name for p in folders if not (p / "PROVENANCE.md").is_file()]
    assert missing == []


def test_no_file_holds_merge_conflict_markers() -> None:
    """Seen: .gitignore was committed with a merge's conflict markers in it (git then reads
    the marker lines as patterns and the ignore rules between them half apply)."""
    starts = (b"<" * 7 + b" ", b">" * 7 + b" ")
    offenders = []
    for name in _files():
        path = REPO / name
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_bytes().splitlines(), 1):
            if line.startswith(starts):
                offenders.append(f"{name}:{number}")
    assert offenders == []


def test_no_file_is_a_link_out_of_the_checkout() -> None:
    """Seen (2026-12-07): a worktree's ``.venv``, a symlink to the main checkout's virtual
    environment, was committed (``.venv/`` in .gitignore matched only a directory); the
    merge then replaced that environment with a link to itself, and a clone would point at
    a folder of the machine it was made on. A link in the repository stays inside it."""
    root = REPO.resolve()
    offenders = [
        name
        for name in _files()
        if (REPO / name).is_symlink() and not (REPO / name).resolve().is_relative_to(root)
    ]
    assert offenders == []
