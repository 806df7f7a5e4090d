"""The agent benchmark's measuring tools: the CPU clock it reads per scrape is the process's
own CPU time, and its spread is min/median/p99."""

import os
import subprocess
import sys
from pathlib import Path

from bench.agent_scrape import cpu_clock_seconds, spread


def test_spread_is_min_median_and_nearest_rank_p99() -> None:
    """Over 1..200: min 1, median 100.5, p99 the 198th value."""
    assert spread([float(v) for v in range(200, 0, -1)]) == (1.0, 100.5, 198.0)
    assert spread([3.0]) == (3.0, 3.0, 3.0)


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
