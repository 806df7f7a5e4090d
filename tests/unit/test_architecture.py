"""docs/architecture.md's package table, the package folders and the import contracts agree."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def package_folders() -> set[str]:
    """Every folder of the repository that is a Python package (has an ``__init__.py``),
    the tests aside."""
    found = set()
    for top in REPO.iterdir():
        if top.name == "tests" or top.name.startswith(".") or not (top / "__init__.py").exists():
            continue
        for init in top.rglob("__init__.py"):
            found.add(init.parent.relative_to(REPO).as_posix() + "/")
    return found


def table_rows() -> set[str]:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `([\w/]+/)` \|", text, flags=re.MULTILINE))


def test_every_package_folder_has_a_row_in_the_table() -> None:
    assert package_folders() - table_rows() == set()


def test_every_row_of_the_table_is_a_package_folder() -> None:
    assert table_rows() - package_folders() == set()


def test_the_import_contracts_cover_every_top_level_package() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    roots = set(config["tool"]["importlinter"]["root_packages"])
    top = {folder.split("/")[0] for folder in package_folders()}
    assert roots == top
