"""``--objects FILE`` (repeatable) through the CLI: every ``analyze`` command and
``whatif`` that take ``--nodes FILE --pods FILE`` take it; ``analyze quota`` works on such
files; a bad file or a misplaced flag is one line and a non-zero exit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuscope.cli.main import main
from tests.kueue_objects import documented_setup, kubectl_list

pytestmark = pytest.mark.integration
AT = "2026-11-23T09:00:00Z"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    setup = documented_setup({"reclaimWithinCohort": "Any"})
    out = {}
    for name in ("nodes", "pods", "objects"):
        out[name] = tmp_path / f"{name}.json"
        out[name].write_text(json.dumps(kubectl_list(setup[name])))
    return out


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("what", ["fragmentation", "consolidation", "quota", "all"])
def test_every_snapshot_analysis_takes_objects(
    what: str, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["analyze", what, "--nodes", str(files["nodes"]), "--pods", str(files["pods"]),
            "--objects", str(files["objects"]), "--at", AT, "--json"]  # fmt: skip
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    summary = json.loads(out)["summary"]
    if what == "all":
        assert set(summary) == {"fragmentation", "quota"}
        summary = summary["quota"]
    if what in ("quota", "all"):
        assert summary["projects"]["team-a"]["used_gpus"] == 12
        [job] = summary["pending_jobs"]
        assert job["victims"][0]["job"] == "Job/train-small"


def test_quota_from_files_without_objects_has_no_quota(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the queue objects nothing covers the pods: no guarantee, nothing over one,
    and the job waits only on placement."""
    argv = ["analyze", "quota", "--nodes", str(files["nodes"]), "--pods", str(files["pods"]),
            "--at", AT, "--json"]  # fmt: skip
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    summary = json.loads(out)["summary"]
    assert summary["total_over_quota_gpus"] == 0 and json.loads(out)["findings"] == []
    assert [j["waits_on"] for j in summary["pending_jobs"]] == ["placement"]


def test_whatif_takes_objects(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["whatif", "--nodes", str(files["nodes"]), "--pods", str(files["pods"]),
            "--objects", str(files["objects"]), "--policy", "bestfit", "--json"]  # fmt: skip
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    assert "bestfit" in json.loads(out)["policies"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["analyze", "quota", "--db", "x.duckdb", "--objects", "o.json"],
         "--objects goes with --nodes FILE --pods FILE"),
        (["analyze", "idle", "--nodes", "{nodes}", "--pods", "{pods}"], "idle needs --db"),
        (["analyze", "quota", "--nodes", "{nodes}", "--pods", "{pods}", "--objects", "missing.json"],
         "--objects missing.json does not exist"),
        (["analyze", "quota", "--nodes", "{nodes}", "--pods", "{pods}", "--objects", "{bad}"],
         "is not kubectl JSON"),
        (["whatif", "--db", "x.duckdb", "--objects", "{objects}"], "--objects goes with --nodes"),
    ],
)  # fmt: skip
def test_misplaced_or_bad_objects_are_one_line(
    argv: list[str],
    message: str,
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    paths = {k: str(v) for k, v in files.items()} | {"bad": str(tmp_path / "bad.json")}
    code, out, err = _run([a.format(**paths) for a in argv], capsys)
    assert code != 0 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_the_text_output_gives_each_waiting_jobs_rule(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["analyze", "quota", "--nodes", str(files["nodes"]), "--pods", str(files["pods"]),
            "--objects", str(files["objects"]), "--at", AT]  # fmt: skip
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    [line] = [x for x in out.splitlines() if "team-b/Job/finetune" in x]
    assert "waits on quota [kueue.reclaimWithinCohort]" in line
    assert line.endswith("preempts team-a/Job/train-small")
