"""``gpuscope collector``: the inputs it is given, checked before the service starts.

Kept apart from gpuscope/cli/main.py so the command's checks (settings, token, alerts and
policy files, Kubernetes credential, an existing database opened read-only) live together;
the assembled service is imported only once they pass.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gpuscope.cli.common import open_error
from gpuscope.core.errors import UserError
from gpuscope.core.settings import Settings, load_settings

__all__ = ["check_database", "check_service_inputs", "cmd_collector"]


def cmd_collector(args: argparse.Namespace) -> int:
    targets = [{"url": u, "kind": "agent"} for u in args.target or []]
    targets += [{"url": u, "kind": "dcgm-exporter"} for u in args.dcgm_exporter or []]
    flags = {
        "db": args.db,
        "listen": args.listen,
        "targets": targets or None,
        "prometheus_url": args.prometheus_url,
        "scrape_interval_seconds": args.scrape_interval,
        "kubernetes": args.kubernetes,
    }
    settings = load_settings(args.config, overrides={"collector": flags})
    check_service_inputs(settings)
    if args.check:
        import json

        from gpuscope.collector.querying.query_check import check_query_source

        cs = settings.collector
        found = check_query_source(cs) if cs.prometheus_url else {"url": None, "mode": "scrape"}
        print(json.dumps(found, indent=2))
        return 0
    # the assembled service (FastAPI, the analytics, the report's charts) is imported only
    # once the inputs are known good: a refused flag or file answers in a fraction of the time
    from gpuscope.service import run_service

    return run_service(settings)


def check_service_inputs(settings: Settings) -> None:
    """Read every file the service will need, before the service creates its database:
    a bad token file, alerts config, policy file, Kubernetes credential or damaged database
    is one line, and nothing is created or changed on disk."""
    from gpuscope.collector.cluster.inventory import InventoryError, kube_configuration

    cs = settings.collector
    cs.resolve_api_token()
    if settings.alerts.enabled:
        from gpuscope.alerts.config import load_alerts_config

        load_alerts_config(settings.alerts.config_file)
    if settings.actions.policy_file is not None:
        from gpuscope.actions.policy import load_policies

        load_policies(settings.actions.policy_file)
    try:
        kube_configuration(cs)
    except InventoryError as exc:
        if cs.kubernetes != "auto":
            raise UserError(f"collector.kubernetes={cs.kubernetes}: {exc}") from None
    db = Path(cs.db)
    if db.exists():
        if db.is_dir():
            raise UserError(f"{db} is not a DuckDB database; refusing to open or overwrite it")
        check_database(db)
    elif not db.parent.is_dir():
        raise UserError(f"cannot create database {db}: folder {db.parent} does not exist")
    for what, folder in (("collector.parquet_dir", cs.parquet_dir),
                         ("report.out_dir", settings.report.out_dir)):  # fmt: skip
        if folder is not None and folder.exists() and not folder.is_dir():
            raise UserError(f"{what} {folder} is not a folder")


def check_database(path: Path) -> None:
    """Open an existing database read-only and read its schema version: a damaged,
    foreign, newer or locked file is refused here with one line, untouched."""
    import duckdb

    from gpuscope.collector.storage import schema
    from gpuscope.collector.storage.store_sql import (
        is_duckdb_file,
        missing_bytes,
        read_writer_state,
    )

    if not is_duckdb_file(path):
        raise UserError(f"{path} is not a DuckDB database; refusing to open or overwrite it")
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        raise open_error(path, exc, "stop the other process first") from None
    try:
        missing = missing_bytes(con, path)  # as Store.open checks it, first
        if missing:
            raise UserError(
                f"cannot read database {path} (damaged or truncated?): at least {missing} "
                "bytes of its end are missing (restore it from a backup, or move it away)"
            )
        version = schema.schema_version(con)
        if version == schema.LATEST_VERSION:  # an older one: the collector migrates it first
            read_writer_state(con)  # what the collector reads when it opens the file
    except duckdb.Error as exc:
        raise open_error(path, exc, "") from None
    finally:
        con.close()
    if version > schema.LATEST_VERSION:
        raise UserError(
            f"database {path} has schema version {version}, newer than this gpuscope "
            f"supports ({schema.LATEST_VERSION}); upgrade gpuscope to open it"
        )
