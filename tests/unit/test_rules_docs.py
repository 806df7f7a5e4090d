"""The Prometheus rules, the docs' scrape configuration and the runbooks agree.

An alert that names a scrape job the docs call otherwise never fires (``up{job=...}``
matches nothing), and a runbook link to a missing section sends the person on call nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((REPO / "dashboards" / "rules").glob("*.yaml"))
RUNBOOKS = REPO / "docs" / "runbooks.md"
RUNBOOK_URL = "https://github.com/gpuscope/gpuscope/blob/main/docs/runbooks.md#"


def _alerts() -> list[dict[str, object]]:
    return [
        rule
        for path in RULE_FILES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_links_to_its_runbook_section() -> None:
    alerts = _alerts()
    assert alerts
    anchors = {
        _anchor(line[3:]) for line in RUNBOOKS.read_text().splitlines() if line.startswith("## ")
    }
    for rule in alerts:
        annotations = rule.get("annotations")
        assert isinstance(annotations, dict), rule["alert"]
        url = str(annotations.get("runbook_url", ""))
        assert url.startswith(RUNBOOK_URL), (rule["alert"], url)
        assert url.removeprefix(RUNBOOK_URL) in anchors, (rule["alert"], url)


def test_job_names_in_rules_are_the_scrape_jobs_the_docs_configure() -> None:
    exprs = " ".join(str(rule["expr"]) for rule in _alerts())
    used = set(re.findall(r'job="([^"]+)"', exprs))
    assert used == {"gpuscope-agent", "gpuscope-collector"}
    text = (REPO / "docs" / "dashboards.md").read_text()
    block = re.search(r"```yaml\n(scrape_configs:.*?)```", text, re.S)
    assert block is not None
    jobs = {job["job_name"]: job for job in yaml.safe_load(block.group(1))["scrape_configs"]}
    assert set(jobs) == used
    assert jobs["gpuscope-agent"].get("honor_labels") is True
