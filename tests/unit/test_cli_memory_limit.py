"""The CLI's analyses open the database with ``collector.db_memory_limit``, the bound the
collector's own runs of them have, not DuckDB's default of 80 % of RAM (a week's full
re-analysis at 10,000 GPUs took gigabytes of buffer pool with it)."""

from pathlib import Path
from typing import Any

import pytest

from gpuscope.cli.common import open_store
from gpuscope.cli.main import main
from gpuscope.collector.storage.store import Store


def test_open_store_applies_the_limit(tmp_path: Path) -> None:
    db = tmp_path / "g.duckdb"
    Store.open(db).close()
    with open_store(db, memory_limit="256MB") as store:
        got = store.cursor().execute("SELECT current_setting('memory_limit')").fetchone()[0]
    assert got.replace(" ", "") in ("256.0MiB", "244.1MiB", "256MB")


@pytest.mark.parametrize(
    ("argv", "config"),
    [
        (["analyze", "idle"], "collector:\n  db_memory_limit: 300MB\n"),
        (["report", "weekly", "--week", "2025-W10"], "collector:\n  db_memory_limit: 300MB\n"),
    ],
)
def test_analyze_and_report_pass_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], config: str
) -> None:
    db = tmp_path / "g.duckdb"
    Store.open(db).close()
    cfg = tmp_path / "gpuscope.yaml"
    cfg.write_text(config)
    seen: list[Any] = []
    real = Store.open.__func__  # type: ignore[attr-defined]

    def spy(cls: type[Store], path: Any, **kw: Any) -> Store:
        seen.append(kw.get("memory_limit"))
        return real(cls, path, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(Store, "open", classmethod(spy))
    out = tmp_path / "out"
    extra = ["--out", str(out)] if argv[0] == "report" else []
    main([*argv, "--db", str(db), "--config", str(cfg), *extra])
    assert seen and seen[-1] == "300MB"
