"""JSON logs: one object per record, the time in RFC 3339 with Z, the traceback kept."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

from gpuscope.core.logs import make_handler

TRACE = Path(__file__).resolve().parents[1] / "fixtures" / "alibaba-gpu-v2023" / "csv"
RFC3339_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def test_a_record_is_one_json_object_with_its_traceback() -> None:
    stream = io.StringIO()
    log = logging.getLogger("gpuscope.test.logs")
    log.propagate = False
    log.addHandler(make_handler("json", stream))
    try:
        log.warning("scrape failed target=%s", "http://n1:9835")
        try:
            raise ValueError("bad page")
        except ValueError:
            log.exception("ingest failed")
    finally:
        log.handlers.clear()
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "scrape failed target=http://n1:9835"
    assert (first["level"], first["logger"]) == ("WARNING", "gpuscope.test.logs")
    assert RFC3339_Z.match(first["time"])
    assert "ValueError: bad page" in second["exc_info"]


def _analyze(
    before: tuple[str, ...] = (), after: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> list[str]:
    """The log lines of ``gpuscope [before] analyze fragmentation ... [after]`` on the trace."""
    done = subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", *before, "analyze", "fragmentation",
         "--nodes", str(TRACE / "openb_node_list_gpu_node.csv"),
         "--pods", str(TRACE / "openb_pod_list_multigpu50.csv"), "--log-level", "DEBUG",
         *after],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "GPUSCOPE_LOGGING__FORMAT": "text", **(env or {})},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()


def test_the_flag_before_or_after_the_command_and_the_setting_give_json() -> None:
    json_flag = ("--log-format", "json")
    for lines in (
        _analyze(before=json_flag),
        _analyze(after=json_flag),
        _analyze(env={"GPUSCOPE_LOGGING__FORMAT": "json"}),
    ):
        assert lines and all(json.loads(line)["level"] == "DEBUG" for line in lines)
    text = _analyze()
    assert text and not text[0].startswith("{")
