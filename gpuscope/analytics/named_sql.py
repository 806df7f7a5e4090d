"""Named SQL files (``-- name: NAME`` before each statement, under gpuscope/analytics/sql/)
and how their statements run. ``{held_gpus}`` and ``{summary_row}`` are filled in
(gpuscope/collector/storage/held_gpus.py: how many GPUs a workload interval stands for).

DuckDB refuses a named parameter that its statement does not use, so :func:`run` binds
only those the statement names; callers pass one set of parameters to every query.
"""

from __future__ import annotations

import re
from importlib.resources import files
from typing import Any

import duckdb
import polars as pl

from gpuscope.collector.storage.held_gpus import with_held_gpus

_PARAM = re.compile(r"\$(\w+)")
_COMMENT = re.compile(r"--[^\n]*")


def load_queries(
    name: str, package: str = "gpuscope.analytics", folder: str = "sql"
) -> dict[str, str]:
    """The statements of ``package/folder/name`` by name."""
    text = files(package).joinpath(folder, name).read_text(encoding="utf-8")
    parts = re.split(r"^-- name: (\w+)\n", text, flags=re.MULTILINE)
    named = zip(parts[1::2], parts[2::2], strict=True)
    return {n: with_held_gpus(body.strip()) for n, body in named}


def run(con: duckdb.DuckDBPyConnection, sql: str, **params: Any) -> duckdb.DuckDBPyConnection:
    """Execute ``sql`` with the parameters it names (bound, never formatted in)."""
    used = set(_PARAM.findall(_COMMENT.sub("", sql)))
    return con.execute(sql, {k: v for k, v in params.items() if k in used})


def frame(con: duckdb.DuckDBPyConnection, sql: str, **params: Any) -> pl.DataFrame:
    """The result of ``sql`` as a polars frame (through Arrow)."""
    used = set(_PARAM.findall(_COMMENT.sub("", sql)))
    out: pl.DataFrame = con.sql(sql, params={k: v for k, v in params.items() if k in used}).pl()
    return out
