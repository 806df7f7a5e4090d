"""Where the suite's CPU goes: ``--cpu-time=N`` prints the N test files that used the most.

The suite is CPU-bound on CI's 2 cores: ./scripts/test runs 4 pytest-xdist workers, and a
run on a quiet 2-core machine used 1,185 s of CPU in 598 s of wall time (issue 39). So its
wall time falls only with its CPU, and ``--durations``, which gives each test's wall time,
counts the time a test waited for a core behind the other workers as its own. This counts
each test's CPU: its process's (every thread: DuckDB's workers, servers run in threads) and
its child processes' that ended and were waited for meanwhile (the CLI runs, the collector,
Prometheus). A child that outlives its test (a server a module's fixture starts and stops)
is counted in the test that waits for it, so a file's sum is whole.

Each phase's CPU (setup, call, teardown) travels in its report's ``user_properties``, so
pytest-xdist's workers hand it to the controller, which sums it by file.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Generator
from typing import Any

import pytest

_KEY = "cpu_seconds"
_PHASE = pytest.StashKey[tuple[float, float]]()


def _cpu() -> tuple[float, float]:
    """This process's CPU seconds and its waited-for children's."""
    t = os.times()
    return t.user + t.system, t.children_user + t.children_system


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-time",
        type=int,
        default=0,
        metavar="N",
        help="print the N test files that used the most CPU (their process and children)",
    )


def _measured(item: pytest.Item) -> Generator[None, None, None]:
    if not item.config.getoption("cpu_time"):
        yield
        return
    own, children = _cpu()
    try:
        yield
    finally:
        own_after, children_after = _cpu()
        item.stash[_PHASE] = (own_after - own, children_after - children)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _measured(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _measured(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _measured(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    phase = item.stash.get(_PHASE, None)
    if phase is not None:
        report.user_properties.append((_KEY, phase))
        del item.stash[_PHASE]
    return report


class CpuTotals:
    """The controller's sums, CPU by test file (the tests' process's and the children's),
    and their print at the end of the run."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.own: Counter[str] = Counter()
        self.children: Counter[str] = Counter()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for key, value in report.user_properties:
            if key == _KEY:
                own, children = value
                path = report.nodeid.split("::", 1)[0]
                self.own[path] += float(own)
                self.children[path] += float(children)

    def lines(self) -> list[str]:
        totals = Counter({p: self.own[p] + self.children[p] for p in self.own})
        out = [f"{'total':>9} {'tests':>9} {'children':>9}  file"]
        for path, total in totals.most_common(self.n):
            out.append(f"{total:8.1f}s {self.own[path]:8.1f}s {self.children[path]:8.1f}s  {path}")
        out.append(
            f"{sum(totals.values()):8.1f}s {self.own.total():8.1f}s "
            f"{self.children.total():8.1f}s  all {len(totals)} files"
        )
        return out

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.own:
            return
        terminalreporter.write_sep("=", f"most CPU: {self.n} test files (tests and children)")
        for line in self.lines():
            terminalreporter.write_line(line)


def pytest_configure(config: pytest.Config) -> None:
    n = config.getoption("cpu_time")
    if n and not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        config.pluginmanager.register(CpuTotals(n), "gpuscope-cpu-time")
