"""The agent's install (``pip install gpuscope``, the agent image) carries no Kubernetes
client: it is in the ``server`` extra, which the collector's install and the scripts' add
(issue 24, a lean agent; import-linter keeps ``kubernetes`` out of gpuscope.agent)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_kubernetes_client_is_in_the_server_extra_only() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "kubernetes" not in names(project["dependencies"])
    assert "kubernetes" in names(project["optional-dependencies"]["server"])


def test_the_collector_image_and_the_scripts_install_the_server_extra() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "/opt/collector/bin/pip install '.[server]'" in dockerfile
    assert "-e '.[server,dev]'" in (ROOT / "scripts" / "setup").read_text()
