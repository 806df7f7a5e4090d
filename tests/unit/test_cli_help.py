"""A subcommand's --help shows that subcommand's usage and flags, not its parent's."""

from __future__ import annotations

import pytest

from gpuscope.cli.main import main


def test_report_weekly_help_is_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["report", "weekly", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: gpuscope report weekly ")
    assert "--week YYYY-Www" in out and "--db PATH" in out


def test_report_without_a_kind_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["report"])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "{weekly}" in err[0]
