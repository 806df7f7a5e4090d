"""collector.db_memory_limit: DuckDB's buffer for the database, from the settings to the file."""

from pathlib import Path

import pytest

from collector.store import Store
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
