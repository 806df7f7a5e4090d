"""The weekly report's folder writer (gpuscope/analytics/report/weekly.py ``write_folder``):
the CLI writes the files a collector answered with it, so a path that leaves the folder is
refused, and a write swaps the whole folder in."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscope.analytics.report.weekly import write_folder
from gpuscope.core.errors import UserError


def test_the_folder_is_swapped_in_whole(tmp_path: Path) -> None:
    final = tmp_path / "2025-W10"
    write_folder(final, {"report.html": b"old", "tables/a.csv": b"x\n"})
    write_folder(final, {"report.html": b"new", "summary.md": b"s"})
    assert sorted(p.name for p in final.rglob("*") if p.is_file()) == ["report.html", "summary.md"]
    assert (final / "report.html").read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["2025-W10"]  # no staging left behind


@pytest.mark.parametrize("name", ["../escape.html", "/etc/passwd", "tables/../../x"])
def test_a_path_outside_the_folder_is_refused(tmp_path: Path, name: str) -> None:
    final = tmp_path / "2025-W10"
    write_folder(final, {"report.html": b"kept"})
    with pytest.raises(UserError, match="outside the report's folder"):
        write_folder(final, {"report.html": b"new", name: b"bad"})
    assert (final / "report.html").read_bytes() == b"kept"
    assert [p.name for p in tmp_path.iterdir()] == ["2025-W10"]  # nothing else written
