"""One time format for people and programs: RFC 3339, UTC, Z."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuscope.core.timefmt import api_times, rfc3339
from gpuscope.demo.run import follow_up_lines, gpuscope_command

AT = datetime(2026, 11, 23, 0, 10, 26, tzinfo=UTC)


@pytest.mark.parametrize(
    "value",
    [
        AT,
        AT.replace(tzinfo=None),  # the store's naive UTC
        AT.astimezone(timezone(timedelta(hours=2))),
        AT.timestamp(),
        int(AT.timestamp()),
    ],
)
def test_every_form_of_a_time_is_written_one_way(value: datetime | float) -> None:
    assert rfc3339(value) == "2026-11-23T00:10:26Z"


def test_fractions_of_a_second_are_kept() -> None:
    assert rfc3339(AT.replace(microsecond=500_000)) == "2026-11-23T00:10:26.500000Z"


def test_api_times_rewrites_time_fields_only() -> None:
    body = {
        "since": "2026-11-23T00:10:26",
        "items": [{"observed_at": "2026-11-23T00:10:26+00:00", "start_time": 1795392626.0}],
        "evidence": {"idle_since": AT, "gpus": 2, "window_minutes": 30},
        "ts": None,
        "name": "2026-11-23 is a name here",
        "start": 5,  # a small number under a time key is not a Unix time
    }
    got = api_times(body)
    assert got["since"] == got["items"][0]["observed_at"] == "2026-11-23T00:10:26Z"
    assert got["items"][0]["start_time"] == "2026-11-23T00:10:26Z"
    assert got["evidence"] == {"idle_since": "2026-11-23T00:10:26Z", "gpus": 2,
                               "window_minutes": 30}  # fmt: skip
    assert (got["ts"], got["name"], got["start"]) == (None, body["name"], 5)


def test_the_bare_name_is_used_only_when_path_finds_this_installation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bindir = str(Path(sys.executable).absolute().parent)
    if not (Path(bindir) / "gpuscope").is_file():
        pytest.skip("no console script beside this interpreter")
    monkeypatch.setenv("PATH", bindir + os.pathsep + "/usr/bin:/bin")
    assert gpuscope_command() == "gpuscope"
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert gpuscope_command() != "gpuscope" and gpuscope_command().endswith("gpuscope")


def test_the_demo_prints_whole_seconds(tmp_path: Path) -> None:
    lines = follow_up_lines(tmp_path / "g.duckdb", tmp_path, tmp_path / "s.yaml",
                            tmp_path / "r.html", AT.replace(microsecond=708_923))  # fmt: skip
    assert lines[0].startswith("simulated time: 2026-11-23T00:10:26Z ")


def test_analyze_json_writes_times_as_the_api_does() -> None:
    from gpuscope.analytics.base import Analysis
    from gpuscope.analytics.runner import as_json
    from gpuscope.core.records import Finding, finding_id

    subject = {"namespace": "r", "pod": "nb-0"}
    f = Finding(finding_id("idle_session", subject), "idle_session", "warning", subject,
                AT, AT, evidence={"idle_since": "2026-11-23T00:10:26"})  # fmt: skip
    out = as_json({"idle": Analysis(kinds=("idle_session",), findings=[f])})
    [got] = out["findings"]
    assert got["since"] == got["observed_at"] == "2026-11-23T00:10:26Z"
    assert got["evidence"]["idle_since"] == "2026-11-23T00:10:26Z"


def test_analyze_text_prints_data_until_as_at_takes_it() -> None:
    """Seen in the demo's output: `data_until=2026-11-23T00:10:24`, naive, which --at
    refuses; the text summary writes it as the JSON does."""
    from gpuscope.analytics.base import Analysis
    from gpuscope.analytics.runner import as_json, render_text

    summary = {"idle_sessions": 2, "data_until": "2026-11-23T00:10:26"}
    analyses = {"idle": Analysis(kinds=("idle_session",), summary=summary)}
    assert "idle: idle_sessions=2, data_until=2026-11-23T00:10:26Z" in render_text(analyses)
    assert as_json(analyses)["summary"]["data_until"] == "2026-11-23T00:10:26Z"
