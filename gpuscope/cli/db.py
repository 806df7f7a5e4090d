"""``gpuscope db compact``: give a database file's free space back (docs/storage.md).

The collector's maintenance rolls up, deletes and compacts inside the file; DuckDB reuses the
freed blocks but never shrinks the file. This command rewrites it into a fresh file and
swaps it in (gpuscope/collector/storage/store_reclaim.py); it needs the database to itself, so it
runs while no collector holds it (DuckDB's lock refuses it otherwise, in one line).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuscope.core.errors import UserError
from gpuscope.core.settings import load_settings


def add_db_parser(sub: Any, add_logging: Callable[[argparse.ArgumentParser], None]) -> None:
    """The ``db`` subcommand (``db compact``) on the CLI's subparsers."""
    parent = sub.add_parser("db", help="database upkeep: give free space back to the disk")
    kinds = parent.add_subparsers(
        dest="what", required=True, metavar="{compact}", parser_class=type(parent)
    )
    comp = kinds.add_parser("compact", help="rewrite the database file without its free blocks")
    comp.add_argument("--db", type=Path, metavar="PATH", help="the database (default collector.db)")
    comp.add_argument(
        "--dry-run", action="store_true", help="print what it would give back; change nothing"
    )
    comp.add_argument(
        "--min-free",
        type=float,
        default=0.0,
        metavar="RATIO",
        help="rewrite only when free blocks are at least this share of the file (default 0)",
    )
    comp.add_argument("--config", type=Path, help="YAML settings file (collector.db)")
    add_logging(comp)


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def cmd_db(args: argparse.Namespace) -> int:
    """Print the file's size and free space; rewrite it unless ``--dry-run``."""
    from gpuscope.collector.storage.store import Store

    if not 0 <= args.min_free <= 1:
        raise UserError(f"--min-free {args.min_free:g}: expected a share between 0 and 1")
    db = Path(args.db if args.db is not None else load_settings(args.config).collector.db)
    if not db.exists():
        raise UserError(f"database {db} does not exist")
    with Store.open(db) as store:
        got = store.reclaim_space(dry_run=args.dry_run, min_free_ratio=args.min_free)
    free = f"{_mb(got.free_bytes)} in free blocks"
    if args.dry_run:
        print(f"{db}: {_mb(got.file_bytes)}, {free}; a rewrite gives back at least that")
    elif got.rewritten:
        print(
            f"{db}: {_mb(got.file_bytes)} -> {_mb(got.new_file_bytes or 0)} "
            f"({_mb(got.reclaimed_bytes)} given back)"
        )
    else:
        print(f"{db}: {_mb(got.file_bytes)}, {free}; not rewritten (below --min-free)")
    return 0
