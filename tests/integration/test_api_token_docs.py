"""The collector's API token: no value written for one in the repository's tracked docs and
manifests (listed by git) is accepted."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpuscope.core.collector_settings import check_api_token
from gpuscope.core.errors import ConfigError
from tests.unit.test_api_token import _tokens_in

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _documented_tokens() -> set[str]:
    """Every value written for an API token in the repository's docs and manifests."""
    files = subprocess.run(
        ["git", "ls-files", "*.md", "*.yaml", "*.yml", "*.tpl"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    found: set[str] = set()
    for name in files:
        found |= _tokens_in((REPO / name).read_text(encoding="utf-8"))
    return found


def test_every_token_written_in_the_docs_is_refused() -> None:
    for token in _documented_tokens():
        with pytest.raises(ConfigError):
            check_api_token(token)
