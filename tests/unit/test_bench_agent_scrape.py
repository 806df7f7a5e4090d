"""The agent benchmark's measuring tools: the CPU clock it reads per scrape is the process's
own CPU time, and its spread is min/median/p99."""

from bench.agent_scrape import spread


def test_spread_is_min_median_and_nearest_rank_p99() -> None:
    """Over 1..200: min 1, median 100.5, p99 the 198th value."""
    assert spread([float(v) for v in range(200, 0, -1)]) == (1.0, 100.5, 198.0)
    assert spread([3.0]) == (3.0, 3.0, 3.0)
