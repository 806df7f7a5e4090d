"""The agent benchmark's CPU clock (bench/agent_scrape.py) against a real child process: what
it reads is the process's own CPU time, every thread's, as /proc/<pid>/stat counts it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.agent_scrape import cpu_clock_seconds

pytestmark = pytest.mark.integration


def test_cpu_clock_counts_what_proc_stat_counts() -> None:
    """A child that burns CPU in a thread and then waits: the process CPU clock (every
    thread) agrees with utime + stime in /proc/<pid>/stat to within their tick."""
    code = (
        "import threading, sys\n"
        "def burn():\n"
        "    x = 0\n"
        "    for i in range(3_000_000): x += i\n"
        "t = threading.Thread(target=burn); t.start(); t.join()\n"
        "print('done', flush=True); sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "done"
        clock = cpu_clock_seconds(child.pid)
        fields = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()
        tick = 1 / os.sysconf("SC_CLK_TCK")
        stat = (int(fields[11]) + int(fields[12])) * tick
        assert clock > 0.05  # the finished thread's time is counted
        assert abs(clock - stat) <= 2 * tick
    finally:
        child.communicate("")
