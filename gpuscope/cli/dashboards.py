"""``gpuscope dashboards export DIR``: the Grafana dashboards and Prometheus rules, from the
installed package.

The files are made in the repository's ``dashboards/`` folder (generated JSON, hand-written
rules); the wheel carries copies under ``gpuscope/_shipped/`` (``pyproject.toml``,
``[tool.hatch.build.targets.wheel.force-include]``), so a site that installed gpuscope with
pip has them without a checkout. From a source checkout (an editable install, or
``PYTHONPATH``) there is no ``_shipped`` folder, and the repository's own files are read.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from gpuscope.core.errors import UserError

log = logging.getLogger(__name__)

#: Where the wheel puts the files, inside the ``gpuscope`` package.
SHIPPED = "_shipped"
#: The groups exported, each a sub-folder of the output: the suffix of its files.
GROUPS: dict[str, str] = {"dashboards": ".json", "rules": ".yaml", "provisioning": ".yml"}


@dataclass(frozen=True)
class ShippedFile:
    """One dashboard, rule file or provisioning file: its group, name and text."""

    group: str
    name: str
    text: str


def _source_root() -> Traversable | None:
    """The folder holding ``dashboards/``-shaped data: the wheel's copy, else the checkout's
    ``dashboards/`` (the package's parent folder), else none."""
    shipped = files("gpuscope") / SHIPPED
    if shipped.is_dir():
        return shipped
    checkout = Path(str(files("gpuscope"))).parent / "dashboards"
    return checkout if (checkout / "rules").is_dir() else None


def shipped_files() -> list[ShippedFile]:
    """Every dashboard, rule file and provisioning file this install carries, sorted.

    Dashboards sit at the top of their folder (beside the Python that generates them in a
    checkout); rules and provisioning in their own sub-folders."""
    root = _source_root()
    if root is None:
        raise UserError("this install carries no dashboards (a wheel built without them?)")
    found: list[ShippedFile] = []
    for group, suffix in GROUPS.items():
        folder = root if group == "dashboards" else root / group
        if not folder.is_dir():
            continue
        for item in folder.iterdir():
            if item.is_file() and item.name.endswith(suffix):
                found.append(ShippedFile(group, item.name, item.read_text(encoding="utf-8")))
    return sorted(found, key=lambda f: (f.group, f.name))


def export(out: Path) -> list[Path]:
    """Write every shipped file under ``out/<group>/``; return the paths written.

    An existing file of the same name is replaced (they are generated files); anything else
    in ``out`` is left alone."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder")
    written: list[Path] = []
    for item in shipped_files():
        path = out / item.group / item.name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(item.text, encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
        written.append(path)
    log.info("exported %d files to %s", len(written), out)
    return written


def add_dashboards_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``dashboards`` subcommand (``dashboards export DIR``) on the CLI's subparsers."""
    parent: argparse.ArgumentParser = sub.add_parser(
        "dashboards", help="the Grafana dashboards and Prometheus rules this version ships"
    )
    kinds = parent.add_subparsers(
        dest="what", required=True, metavar="{export}", parser_class=type(parent)
    )
    exp = kinds.add_parser(
        "export",
        help="write the dashboards (JSON), alerting and recording rules and Grafana "
        "provisioning into DIR/dashboards, DIR/rules, DIR/provisioning",
    )
    exp.add_argument("dir", type=Path, metavar="DIR", help="output folder (created if missing)")
    return exp


def cmd_dashboards(args: argparse.Namespace) -> int:
    """Export, and print one line per file written."""
    for path in export(args.dir):
        print(path)
    return 0
