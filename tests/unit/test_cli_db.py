"""`gpuscope db compact`: a dry run previews and changes nothing; a run gives space back."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscope.cli.main import main
from gpuscope.collector.storage.store import Store
from tests.unit.test_store_rollups import filled


def test_db_compact_previews_then_gives_space_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    filled(tmp_path).close()
    db = tmp_path / "g.duckdb"
    size = db.stat().st_size
    with Store.open(db) as store:
        rows = (
            store.cursor()
            .execute("SELECT count(*), sum(hash(series_id, ts, value)) FROM samples")
            .fetchone()
        )
    assert main(["db", "compact", "--db", str(db), "--dry-run"]) == 0
    assert "in free blocks" in capsys.readouterr().out
    assert db.stat().st_size == size
    assert main(["db", "compact", "--db", str(db)]) == 0
    assert "given back" in capsys.readouterr().out
    assert db.stat().st_size < size
    with Store.open(db, read_only=True) as store:
        assert (
            store.cursor()
            .execute("SELECT count(*), sum(hash(series_id, ts, value)) FROM samples")
            .fetchone()
            == rows
        )


def test_db_compact_of_a_missing_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["db", "compact", "--db", str(tmp_path / "none.duckdb")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0]
    assert not (tmp_path / "none.duckdb").exists()


def test_the_docs_give_the_compaction_thresholds_the_code_has() -> None:
    """docs/storage.md and docs/cli.md name the defaults the library and the CLI use."""
    import argparse
    import re

    from gpuscope.cli.db import add_db_parser
    from gpuscope.collector.storage.store_reclaim import DEFAULT_MIN_FREE_RATIO

    parser = argparse.ArgumentParser()
    add_db_parser(parser.add_subparsers(dest="cmd"), lambda p: None)
    cli_default = parser.parse_args(["db", "compact"]).min_free
    repo = Path(__file__).resolve().parents[2]
    storage = (repo / "docs" / "storage.md").read_text(encoding="utf-8")
    cli = (repo / "docs" / "cli.md").read_text(encoding="utf-8")
    assert re.search(
        rf"`Store.reclaim_space`\s+defaults\s+to\s+{DEFAULT_MIN_FREE_RATIO:g}", storage
    )
    assert re.search(rf"`--min-free`,\s+default\s+{cli_default:g}\b", storage)
    assert re.search(rf"`--min-free RATIO`.*\(default {cli_default:g}\b", cli)
