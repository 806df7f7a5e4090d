"""What the CLI's subcommand modules share: the years ``--at``/``--week`` accept and opening
the database with one clear line when it cannot be opened.

It sits below ``cli.py`` and the ``cli_*`` modules, so they import it and not each other
(``cli.py`` imports the subcommands; a subcommand importing ``cli.py`` back made a cycle).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuscope.core.errors import UserError
from gpuscope.core.timefmt import FIRST_YEAR, LAST_YEAR

# ``--at`` and ``--week`` are refused outside these years (the CLI's modules import them here)
__all__ = ["FIRST_YEAR", "LAST_YEAR", "open_store"]


def open_store(
    path: Path,
    *,
    read_only: bool = True,
    busy: str = "analyse a copy of it, or use the collector's API",
    memory_limit: str | None = None,
) -> Any:
    """The database for a CLI command, with one clear line when a running collector holds
    it (``busy`` says what to do instead) or it cannot be opened. ``memory_limit`` is
    DuckDB's (the analyses pass ``collector.db_memory_limit``, the bound the collector's own
    runs of them have: DuckDB's default, 80 % of RAM, lets a week's full re-analysis at
    10,000 GPUs take gigabytes of buffer pool it does not need)."""
    import duckdb

    from gpuscope.collector.storage.store import Store

    try:
        return Store.open(path, read_only=read_only, memory_limit=memory_limit)
    except duckdb.Error as exc:
        raise open_error(path, exc, busy) from None
    except UserError as exc:  # Store.open's own line: a lock held says what to do instead
        if "lock" in str(exc).lower():
            raise open_error(path, exc, busy) from None
        raise


def open_error(path: Path, exc: Exception, busy: str) -> UserError:
    """One line for a database DuckDB cannot open: held by another process, or damaged."""
    if "lock" in str(exc).lower():
        hint = f": {busy}" if busy else ""
        return UserError(f"{path} is in use by another process (a running collector?){hint}")
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    return UserError(f"cannot read database {path} (damaged or truncated?): {first}")


#: ``--objects`` help text, one for every command that takes it (docs/cli.md).
OBJECTS_HELP = (
    "kubectl get ... -o json of other kinds the analysis reads (ClusterQueues, LocalQueues, "
    "Cohorts, ResourceFlavors, KAI Queues, ResourceQuotas, PodDisruptionBudgets, DRA "
    "ResourceSlices and ResourceClaims, Topologies, ...); repeatable; with --nodes/--pods"
)


def add_objects_argument(parser: Any) -> None:
    """``--objects FILE`` (repeatable) beside ``--nodes FILE --pods FILE``: the
    gpuscope.core.kube_objects convention."""
    parser.add_argument("--objects", type=Path, action="append", metavar="FILE", help=OBJECTS_HELP)


def objects_of(args: Any) -> Any:
    """The ObjectSet of ``--objects`` (empty when none is given); refused without
    ``--nodes``: the objects describe the same snapshot as the node and pod files."""
    from gpuscope.core.kube_objects import ObjectSet, load_objects

    paths = getattr(args, "objects", None) or []
    if paths and getattr(args, "nodes", None) is None:
        raise UserError("--objects goes with --nodes FILE --pods FILE")
    return load_objects(paths) if paths else ObjectSet()
