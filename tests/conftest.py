"""Shared fixtures: where the third-party reference data lives, free loopback ports."""

import socket
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: ../shared/data beside the checkout (CI clones with shared/ beside it).
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data not found at {SHARED_DATA}")
    return SHARED_DATA


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
