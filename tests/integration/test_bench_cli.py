"""`python -m bench` end to end on its fastest benchmark: runs, writes valid JSON and Markdown."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def test_quick_parse_run_writes_results(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "parse", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["quick"] is True and doc["machine"]["cores"] >= 1
    [module] = doc["modules"]
    assert module["name"] == "parse" and module["status"] == "ok"
    parser = module["figures"][0]
    assert parser["unit"] == "series/s" and parser["value"] > 0
    assert parser["reference"]["label"] == "prometheus_client parser"
    assert parser["reference"]["value"] > 0
    md = (tmp_path / "results.md").read_text()
    assert "| what | measured | reference (same run) | aim |" in md
