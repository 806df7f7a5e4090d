"""Shared fixtures: the third-party reference data (tests/fixtures), free loopback ports."""

import gc
import itertools
import os
import random
import socket
from pathlib import Path

import pytest

from tests.paths import FIXTURES


def pytest_collection_finish(session: pytest.Session) -> None:
    """Every object alive once the tests are collected (the modules, the test items) lives
    to the end of the run: moved out of the collector's sight, so that each full collection
    (thousands in a run of the suite's in-process tests) no longer walks them. Measured
    (``gc.callbacks``): the time in collections of test_report.py 1.13 -> 0.75 s, of
    test_idle_read_bound.py 0.43 -> 0.20 s, test_consolidation_budgets_checked.py
    1.47 -> 1.20 s (issue 39)."""
    gc.freeze()


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """tests/fixtures: one folder per third-party data set, each with its PROVENANCE.md."""
    return FIXTURES


#: Each pytest-xdist worker hands out loopback ports from a block of its own, all below
#: Linux's ephemeral range (32768-60999 by default).
PORT_BASE = 20000
PORT_BLOCK = 300
_next_port = itertools.count(random.randrange(PORT_BLOCK))


def _worker_index() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = worker.removeprefix("gw")
    return int(digits) % 40 if digits.isdigit() else 0


def free_port() -> int:
    """A loopback port that is free now and that no other worker of this run hands out.

    Why not ``bind(port 0)``: the kernel picks that port from the ephemeral range, where
    the other workers' ports and every outgoing connection's source port come from too; in
    the moment between this check and the server's own bind, another worker's server could
    take it, and a test would then talk to that server (its readiness check answered by the
    wrong process). Ports from a block of this worker's own, below the ephemeral range, are
    taken by nothing else of this run."""
    first = PORT_BASE + _worker_index() * PORT_BLOCK
    for _ in range(PORT_BLOCK):
        port = first + next(_next_port) % PORT_BLOCK
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use (or in TIME_WAIT): the next one
            return port
    raise RuntimeError(f"no free loopback port in {first}-{first + PORT_BLOCK - 1}")


#: How often a test's loopback HTTP server looks for its shutdown (socketserver's default is
#: 0.5 s, which every ``shutdown()`` waited for: about 0.3 s a test that starts one).
SHUTDOWN_POLL_S = 0.02


# --cpu-time=N: the test files that used the most CPU (tests/cpu_time.py)
from tests.cpu_time import (  # noqa: E402,F401
    pytest_addoption,
    pytest_configure,
    pytest_runtest_call,
    pytest_runtest_makereport,
    pytest_runtest_setup,
    pytest_runtest_teardown,
)
