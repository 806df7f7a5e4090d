"""The demo's live scraping lasts as long as its weekly report: on a slow machine the report
(written in the background beside the scraping) can outlast the scraping's seconds, and the
detectors that run after it must still find live data in their seconds-long windows."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from gpuscope.collector.service import CollectorService
from gpuscope.demo import run

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

REPORT_DELAY_S = 4.0


def test_scraping_goes_on_until_the_report_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report_done = threading.Event()
    late_cycles: list[float] = []
    real_report = run._report
    real_cycle = CollectorService.scrape_cycle

    def slow_report(*args: Any, **kwargs: Any) -> Any:
        threading.Event().wait(REPORT_DELAY_S)  # a loaded machine's report
        try:
            return real_report(*args, **kwargs)
        finally:
            report_done.set()

    def cycle(self: CollectorService) -> int:
        stored = real_cycle(self)
        if report_done.is_set():
            late_cycles.append(self.clock())
        return stored

    monkeypatch.setattr(run, "_report", slow_report)
    monkeypatch.setattr(CollectorService, "scrape_cycle", cycle)
    assert run.run_demo(out=tmp_path / "out", nodes=6, seconds=1.0, days=0) == 0
    # the scraping outlived its one second until the report was written, and then ended
    # (with the cycle running then, or the next if it ended as the report's thread did)
    assert 1 <= len(late_cycles) <= 2
    assert (tmp_path / "out" / "findings.json").is_file()
