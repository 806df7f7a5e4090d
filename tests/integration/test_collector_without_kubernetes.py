"""A collector with ``collector.kubernetes: none`` (fleet mode without a cluster, the demo)
never loads the Kubernetes client: ~22 MB resident and 0.2 s of imports it has no use for
(the demo's peak memory is one of issue 39's aims). Checked in a fresh interpreter, since
this test process may have imported it already."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.helpers import ENV

PROGRAM = """
import sys
from gpuscope.collector.service import CollectorService
from gpuscope.core.settings import Settings
import gpuscope.demo.run
settings = Settings.model_validate(
    {"collector": {"kubernetes": "none", "db": sys.argv[1], "listen": "127.0.0.1:0"}}
)
service = CollectorService(settings)
assert service.inventory is None
service.store.close()
print("kubernetes" in sys.modules)
"""


def test_a_collector_without_a_cluster_never_imports_the_kubernetes_client(
    tmp_path: Path,
) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(tmp_path / "c.duckdb")],
        capture_output=True, text=True, env=ENV, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
