"""`gpuscope dashboards export DIR`, and the wheel's list of the files it ships."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from gpuscope.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_ships_every_dashboard_and_rule_file() -> None:
    """A new dashboard or rule file is in the wheel too: pyproject's force-include lists each
    dashboard and the rules/provisioning folders."""
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    shipped = build["targets"]["wheel"]["force-include"]
    for source in sorted((ROOT / "dashboards").glob("*.json")):
        assert shipped[f"dashboards/{source.name}"] == f"gpuscope/_shipped/{source.name}"
    assert shipped["dashboards/rules"] == "gpuscope/_shipped/rules"
    assert shipped["dashboards/provisioning"] == "gpuscope/_shipped/provisioning"


def test_export_writes_the_dashboards_and_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dashboards", "export", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out.split()
    wanted = [*sorted((ROOT / "dashboards").glob("*.json")),
              *sorted((ROOT / "dashboards" / "rules").glob("*.yaml"))]  # fmt: skip
    assert len(wanted) >= 8
    for source in wanted:
        group = "rules" if source.parent.name == "rules" else "dashboards"
        out = tmp_path / "out" / group / source.name
        assert out.read_text() == source.read_text()
        assert str(out) in printed
    assert (tmp_path / "out" / "provisioning" / "gpuscope.yml").is_file()


def test_export_onto_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "taken"
    target.write_text("x")
    assert main(["dashboards", "export", str(target)]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "not a folder" in err
