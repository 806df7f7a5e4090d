"""bench/peak.py measures the analysis's own process, not the benchmark that spawned it.

Linux carries ``ru_maxrss`` over fork and exec: a benchmark process that had just built the
10,000-GPU history (4.4 GB) saw every analysis it spawned report 4.4 GB. The child's peak
is its own memory map's high-water mark (``VmHWM``).
"""

from __future__ import annotations

import numpy as np

from bench.peak import measure, own_peak_rss

MB = 2**20


def allocate(mb: int) -> str:
    """Touch ``mb`` MiB and say so (module-level: the spawned child imports it by name)."""
    block = np.ones(mb * MB // 8)
    return f"{block.nbytes // MB} MiB"


def test_a_small_child_of_a_big_parent_reports_its_own_peak() -> None:
    parent = np.ones(400 * MB // 8)  # the parent holds 400 MiB while the child runs
    assert own_peak_rss() >= 400 * MB
    small = measure(allocate, 10)
    assert small.summary == "10 MiB"
    assert small.rss_bytes < 300 * MB, small.rss_bytes / MB
    big = measure(allocate, 500)
    assert big.rss_bytes >= 500 * MB
    del parent
