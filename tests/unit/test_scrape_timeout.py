"""A page parsed past the scrape timeout fails the scrape but keeps the CPU it cost.

Seen in CI: on a loaded machine a churning target's 20,000-line page was fetched in time
and parsed too late; the late outcome was rebuilt with ``cpu_seconds=0``, so the CPU budget
(gpuscope/collector/scraping/cpu_budget.py) never held that target and it was parsed at every tick.
"""

from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.scraping.outcome import ScrapeOutcome, Target, past_timeout

TARGET = Target("http://10.0.0.1:9835/metrics")


def test_a_late_page_fails_and_keeps_its_cpu() -> None:
    parsed = ScrapeOutcome(
        TARGET, 100.0, 0.0, True, batch=Batch(TARGET.url, 100_000), cpu_seconds=0.7
    )
    late = past_timeout(parsed, elapsed=1.2, timeout_seconds=0.9)
    assert not late.up and late.reason == "timeout" and late.batch is None
    assert "past its 0.9s timeout" in late.error
    assert late.cpu_seconds == 0.7
    assert late.started_at == 100.0


def test_a_page_in_time_or_already_failed_is_left_alone() -> None:
    parsed = ScrapeOutcome(TARGET, 100.0, 0.0, True, cpu_seconds=0.2)
    assert past_timeout(parsed, elapsed=0.5, timeout_seconds=0.9) is parsed
    failed = ScrapeOutcome(TARGET, 100.0, 0.0, False, "connect refused", reason="connect")
    assert past_timeout(failed, elapsed=5.0, timeout_seconds=0.9) is failed
