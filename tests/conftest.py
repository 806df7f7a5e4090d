"""Shared fixtures: the third-party reference data (tests/fixtures), free loopback ports."""

import socket
from pathlib import Path

import pytest

from tests.paths import FIXTURES


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """tests/fixtures: one folder per third-party data set, each with its PROVENANCE.md."""
    return FIXTURES


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: How often a test's loopback HTTP server looks for its shutdown (socketserver's default is
#: 0.5 s, which every ``shutdown()`` waited for: about 0.3 s a test that starts one).
SHUTDOWN_POLL_S = 0.02
