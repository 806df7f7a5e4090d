"""Every CLI input is checked before anything is created on disk (issue 13, CLI bullet).

Each case runs the real ``gpuscope`` command in a subprocess, in an empty working folder
(a database and files prepared beside it where the case needs them), and checks what an
operator sees: one line on stderr, no traceback, exit code 2, no file created, and the
stored data byte for byte as it was.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from gpuscope.collector.storage.store import Store

pytestmark = pytest.mark.integration


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes (folders too, as empty entries)."""
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b""
        for p in sorted(folder.rglob("*"))
    }


def gpuscope(cwd: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run the CLI in ``cwd``; the exit code and stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("GPUSCOPE_")},
            "KUBECONFIG": str(cwd / "no-kubeconfig"),
            **(env or {}),
        },
    )
    return proc.returncode, proc.stderr


def assert_refused(
    cwd: Path, args: list[str], message: str, env: dict[str, str] | None = None
) -> None:
    """Exit 2, one line naming ``message``, no traceback, nothing created or changed."""
    before = snapshot(cwd)
    code, err = gpuscope(cwd, *args, env=env)
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert message in err, err
    assert snapshot(cwd) == before


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A folder with a good database (one finding stored) and a policy file."""
    with Store.open(tmp_path / "good.duckdb") as store:
        store.record_findings(
            [
                {
                    "id": "f1",
                    "kind": "idle_session",
                    "severity": "warning",
                    "subject": {"namespace": "ml", "pod": "nb-0"},
                    "since": "2026-11-02T10:00:00+00:00",
                    "observed_at": "2026-11-02T11:00:00+00:00",
                    "evidence": {},
                    "recommendation": None,
                }
            ],
            datetime(2026, 11, 2, 11, tzinfo=UTC),
            kinds=["idle_session"],
        )
    (tmp_path / "policies.yaml").write_text(
        yaml.safe_dump({"policies": [{"name": "idle", "type": "idle"}]})
    )
    return tmp_path


COLLECTOR = ["collector", "--db", "new.duckdb", "--listen", "127.0.0.1:0", "--kubernetes", "none"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--scrape-interval", "inf"], "collector.scrape_interval_seconds"),
        (["--scrape-interval", "1e12"], "collector.scrape_interval_seconds"),
        (["--scrape-interval", "1e-9"], "collector.scrape_interval_seconds"),
        (["--scrape-interval", "nan"], "collector.scrape_interval_seconds"),
        (["--prometheus-url", "notaurl"], "collector.prometheus_url"),
        (["--prometheus-url", "http://host:99999"], "collector.prometheus_url"),
        (["--kubernetes", "in-cluster"], "collector.kubernetes"),
        (["--target", "http://"], "collector.targets.0.url"),
        (["--db", "no-such-folder/x.duckdb"], "folder no-such-folder does not exist"),
    ],
)
def test_bad_collector_flags_are_one_line_and_create_no_database(
    work: Path, flags: list[str], message: str
) -> None:
    """``--scrape-interval inf``/``1e12`` ended in OverflowError (exit 1), ``1e-9`` was
    accepted, ``--prometheus-url notaurl`` started and failed every cycle."""
    assert_refused(work, [*COLLECTOR, *flags], message)


def test_a_bogus_log_level_in_the_environment_is_one_line(work: Path) -> None:
    """``GPUSCOPE_LOG_LEVEL=bogus`` printed a traceback from logging.basicConfig."""
    for args in (COLLECTOR, ["analyze", "all", "--db", "good.duckdb"]):
        assert_refused(work, args, "GPUSCOPE_LOG_LEVEL", env={"GPUSCOPE_LOG_LEVEL": "bogus"})
    code, err = gpuscope(
        work, "analyze", "all", "--db", "good.duckdb", env={"GPUSCOPE_LOG_LEVEL": "warning"}
    )
    assert code == 0, err  # any case is accepted from the environment


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["analyze", "all", "--db", "good.duckdb", "--at", "0001-01-01T00:00:00Z"], "--at"),
        (["analyze", "idle", "--db", "good.duckdb", "--at", "9999-12-31T23:00:00Z"], "--at"),
        (
            ["act", "--db", "good.duckdb", "--policy", "policies.yaml", "--at", "0001-01-01"],
            "--at",
        ),
        (["report", "weekly", "--db", "good.duckdb", "--week", "0001-W01", "--out", "r"], "--week"),
        (["report", "weekly", "--db", "good.duckdb", "--week", "9999-W52", "--out", "r"], "--week"),
        (
            ["report", "weekly", "--db", "good.duckdb", "--week", "2999-W01", "--out", "r"],
            "is not over",
        ),
        (["analyze", "fragmentation", "--nodes", ".", "--pods", "."], "--nodes . is a folder"),
        (["demo", "--seconds", "-5", "--out", "d"], "argument --seconds"),
        (["demo", "--seconds", "nan", "--out", "d"], "argument --seconds"),
        (["demo", "--days", "inf", "--out", "d"], "argument --days"),
        (["demo", "--nodes", "0", "--out", "d"], "argument --nodes"),
        (["demo", "--nodes", "many", "--out", "d"], "argument --nodes"),
    ],
)
def test_times_and_numbers_out_of_range_are_one_line(
    work: Path, args: list[str], message: str
) -> None:
    """``--at 0001-01-01`` and far-off weeks overflowed the calendar (exit 1); a negative
    or NaN ``demo --seconds`` was accepted; nothing is created (no report or demo folder)."""
    assert_refused(work, args, message)


def _config(work: Path, settings: dict[str, object]) -> list[str]:
    path = work / "settings.yaml"
    path.write_text(yaml.safe_dump(settings))
    return ["--config", str(path)]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"actions": {"policy_file": "bad-policies.yaml"}}, "policies[x].action"),
        ({"actions": {"policy_file": "."}}, "cannot be read"),
        ({"alerts": {"config_file": "bad-alerts.yaml"}}, "alerts config bad-alerts.yaml"),
        ({"alerts": {"config_file": "missing.yaml"}}, "does not exist"),
        ({"collector": {"api_token_file": "missing-token"}}, "collector.api_token_file"),
        (
            {"collector": {"kubernetes": "http://127.0.0.1:1", "kubernetes_ca_file": "ca.pem"}},
            "needs an https:// URL",
        ),
        (
            {"collector": {"kubernetes": "https://127.0.0.1:1", "kubernetes_ca_file": "nope"}},
            "collector.kubernetes_ca_file nope",
        ),
        (
            {"collector": {"kubernetes": "https://127.0.0.1:1", "kubernetes_ca_file": "."}},
            "collector.kubernetes_ca_file",
        ),
        ({"collector": {"parquet_dir": "policies.yaml"}}, "collector.parquet_dir"),
    ],
)
def test_bad_files_stop_the_collector_before_its_database_exists(
    work: Path, settings: dict[str, object], message: str
) -> None:
    """A bad alerts or policy file was refused only after the database file had been
    created and migrated; now every file the service reads is read first."""
    (work / "bad-policies.yaml").write_text(
        yaml.safe_dump({"policies": [{"name": "x", "type": "idle", "action": "explode"}]})
    )
    (work / "bad-alerts.yaml").write_text("receivers: 5\n")
    collector = {"kubernetes": "none", **settings.get("collector", {})}  # type: ignore[dict-item]
    config = _config(work, {**settings, "collector": collector})
    assert_refused(work, [*COLLECTOR[:5], *config], message)


def test_a_half_truncated_database_is_one_line_and_untouched(work: Path) -> None:
    """A half-truncated DuckDB file gave ``internal error: IOException(...)``, exit 1."""
    half = work / "half.duckdb"
    shutil.copy(work / "good.duckdb", half)
    with half.open("r+b") as f:
        f.truncate(half.stat().st_size // 2)
    no_cluster = _config(work, {"collector": {"kubernetes": "none"}})
    for args in (
        ["collector", "--db", "half.duckdb", "--listen", "127.0.0.1:0", "--kubernetes", "none"],
        ["analyze", "all", "--db", "half.duckdb"],
        ["report", "weekly", "--db", "half.duckdb", "--week", "2026-W40", "--out", "r"],
        ["act", "--db", "half.duckdb", "--policy", "policies.yaml", *no_cluster],
    ):
        assert_refused(work, args, "damaged or truncated")


def test_a_database_folder_or_a_missing_database_is_one_line(work: Path) -> None:
    (work / "adir.duckdb").mkdir()
    assert_refused(
        work,
        ["collector", "--db", "adir.duckdb", "--listen", "127.0.0.1:0", "--kubernetes", "none"],
        "not a DuckDB database",
    )
    assert_refused(work, ["analyze", "all", "--db", "missing.duckdb"], "does not exist")
