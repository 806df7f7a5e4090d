"""The Prometheus text parser on a real `gpuscope agent --once` page, the agent run as a
process: every sample equals prometheus_client's reading of it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuscope.collector.scraping.parse import parse_exposition
from tests.unit.test_parse import assert_matches_client

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def agent_page() -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "agent", "--gpu-source", "sim", "--once"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_matches_client_on_gpuscope_agent_page(agent_page: str) -> None:
    """Every sample of a real `gpuscope agent --once` page equals prometheus_client's reading."""
    assert assert_matches_client(agent_page) > 100
    result = parse_exposition(agent_page.encode())
    assert result.types["gpuscope_gpu_utilization_ratio"] == "gauge"
    assert all(dict(lab).get("node") for lab in result.samples.labels[:8])
