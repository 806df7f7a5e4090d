"""The collector's API token: refused when short or a documented example."""

from __future__ import annotations

import re
import secrets
import subprocess
from pathlib import Path

import pytest

from gpuscope.errors import ConfigError
from gpuscope.settings import EXAMPLE_API_TOKENS, MIN_API_TOKEN_LENGTH, check_api_token

REPO = Path(__file__).resolve().parents[2]


def test_a_random_token_of_32_characters_is_accepted_and_none_is_allowed() -> None:
    check_api_token(secrets.token_hex(16))
    check_api_token("")  # no token: every write endpoint answers 403


@pytest.mark.parametrize("token", ["x" * (MIN_API_TOKEN_LENGTH - 1), "tok", "s3cret"])
def test_a_short_token_is_refused(token: str) -> None:
    with pytest.raises(ConfigError, match=f"at least {MIN_API_TOKEN_LENGTH}"):
        check_api_token(token)


@pytest.mark.parametrize(
    "token", [*sorted(EXAMPLE_API_TOKENS), "CHANGE-ME-" + "0" * 40, "my-example-token-" + "a" * 20]
)
def test_an_example_token_is_refused_whatever_its_length(token: str) -> None:
    with pytest.raises(ConfigError, match="example from the docs") as err:
        check_api_token(token)
    assert token not in str(err.value)


def _documented_tokens() -> set[str]:
    """Every value written for an API token in the repository's docs and manifests."""
    files = subprocess.run(
        ["git", "ls-files", "*.md", "*.yaml", "*.yml", "*.tpl"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    pattern = re.compile(r"(?:api[-_]token|GPUSCOPE_API_TOKEN)\s*[:=]\s*['\"]?([^\s'\"#]+)")
    found = set()
    for name in files:
        for value in pattern.findall((REPO / name).read_text(encoding="utf-8")):
            if not value.startswith(("{{", "$", "<")) and "/" not in value:
                found.add(value)
    return found


def test_every_token_written_in_the_docs_is_refused() -> None:
    documented = _documented_tokens()
    assert "change-me-long-random-token" in documented
    for token in documented:
        with pytest.raises(ConfigError):
            check_api_token(token)
