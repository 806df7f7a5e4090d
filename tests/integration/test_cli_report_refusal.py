"""``gpuscope report weekly`` refuses bad input before it loads the report's modules
(matplotlib and the templates, ~0.5 s of imports and 1.1 s of CPU in all): a refusal
answers in the time the settings take to load. Checked in a fresh interpreter, since this
test process may have imported them already."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import ENV

pytestmark = pytest.mark.integration

PROGRAM = """
import sys
from gpuscope.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(code, "matplotlib" in sys.modules, "gpuscope.analytics.report.weekly" in sys.modules)
"""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--db", "{tmp}/missing.duckdb"], "does not exist"),
        (["--db", "{tmp}/missing.duckdb", "--week", "1969-W01"], "expected a week between"),
    ],
    ids=["missing-database", "week-out-of-range"],
)
def test_a_refused_report_never_imports_the_report(
    tmp_path: Path, args: list[str], message: str
) -> None:
    argv = ["report", "weekly", "--out", str(tmp_path / "out"), *args]
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM, *(a.format(tmp=tmp_path) for a in argv)],
        capture_output=True, text=True, env=ENV, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert message in out.stderr, out.stderr
    assert out.stdout.split() == ["2", "False", "False"], out.stdout + out.stderr
    assert not (tmp_path / "out").exists()
