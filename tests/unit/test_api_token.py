"""The collector's API token: refused when short or a documented example."""

from __future__ import annotations

import re
import secrets

import pytest

from gpuscope.core.collector_settings import (
    EXAMPLE_API_TOKENS,
    MIN_API_TOKEN_LENGTH,
    check_api_token,
)
from gpuscope.core.errors import ConfigError


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


TOKEN_WRITTEN = re.compile(r"(?:api[-_]token|GPUSCOPE_API_TOKEN)\s*[:=]\s*['\"]?([^\s'\"#]+)")


def _tokens_in(text: str) -> set[str]:
    """Values written for an API token in ``text`` (templates and placeholders aside)."""
    return {
        value
        for value in TOKEN_WRITTEN.findall(text)
        if not value.startswith(("{{", "$", "<")) and "/" not in value
    }


def test_the_scanner_finds_a_token_written_as_the_old_manifests_did() -> None:
    """The old collector.yaml shipped this Secret; the scan below must see such a line."""
    old_manifest = 'stringData:\n  api-token: "change-me-long-random-token"\n'
    assert _tokens_in(old_manifest) == {"change-me-long-random-token"}
    assert _tokens_in("GPUSCOPE_API_TOKEN=$(openssl rand -hex 24)") == set()
