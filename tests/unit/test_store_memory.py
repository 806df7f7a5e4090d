"""collector.db_memory_limit: DuckDB's buffer for the database, from the settings to the file."""

from pathlib import Path

import pytest

from gpuscope.collector.storage.store import Store
from gpuscope.core.errors import ConfigError
from gpuscope.core.settings import load_settings


def test_the_store_opens_duckdb_with_the_memory_limit_given(tmp_path: Path) -> None:
    with Store.open(tmp_path / "a.duckdb", memory_limit="100MB") as store:
        limit = store.cursor().execute("SELECT current_setting('memory_limit')").fetchone()
    assert limit == ("95.3 MiB",)  # 100 MB, as DuckDB shows it (DuckDB's own: 80 % of RAM)


def test_the_setting_defaults_to_a_gigabyte_and_refuses_what_duckdb_cannot_read() -> None:
    assert load_settings(env={}).collector.db_memory_limit == "1GB"
    assert load_settings(env={}, overrides={"collector": {"db_memory_limit": "25%"}})
    with pytest.raises(ConfigError, match="db_memory_limit"):
        load_settings(env={}, overrides={"collector": {"db_memory_limit": "lots"}})


def test_the_memory_limit_outlives_a_file_rewrite(tmp_path: Path) -> None:
    """gpuscope db compact and the demo reopen the rewritten file: the limit must stay, or
    DuckDB goes back to 80 % of RAM for the rest of the run."""
    with Store.open(tmp_path / "a.duckdb", memory_limit="100MB") as store:
        cur = store.cursor()
        cur.execute("CREATE TABLE a AS SELECT random() AS x FROM range(300000)")
        cur.execute("CREATE TABLE b AS SELECT random() AS x FROM range(300000)")
        cur.execute("CHECKPOINT")
        cur.execute("DROP TABLE a")
        assert store.reclaim_space(min_free_ratio=0).rewritten
        limit = store.cursor().execute("SELECT current_setting('memory_limit')").fetchone()
    assert limit == ("95.3 MiB",)


def test_the_store_opens_duckdb_with_the_threads_given(tmp_path: Path) -> None:
    """collector.db_threads: DuckDB's threads for the database, kept across a reconnect."""
    with Store.open(tmp_path / "a.duckdb", threads=1) as store:
        assert store.cursor().execute("SELECT current_setting('threads')").fetchone() == (1,)
        cur = store.cursor()
        cur.execute("CREATE TABLE a AS SELECT random() AS x FROM range(300000)")
        cur.execute("CHECKPOINT")
        cur.execute("DROP TABLE a")
        assert store.reclaim_space(min_free_ratio=0).rewritten
        assert store.cursor().execute("SELECT current_setting('threads')").fetchone() == (1,)
    with pytest.raises(ConfigError, match="db_threads"):
        load_settings(env={}, overrides={"collector": {"db_threads": 0}})
