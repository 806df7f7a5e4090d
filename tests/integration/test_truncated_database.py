"""A database file cut short is refused by every command that opens it (issue 38).

Seen: ``gpuscope collector --check`` exited 0 on a database truncated at 15-99 % of its
size (its schema version is in the first blocks, still there), and the collector then
failed on it; ``report weekly`` exited 0 too. Now every open compares the file's size with
the blocks its header counts (as the collector's own open does first): one line, exit 2,
the file untouched.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store
from gpuscope.core.errors import UserError
from tests.integration.helpers import ENV

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database of many blocks: four targets' scrapes of 400 series, 300 times (each
    target's scrapes one run of cycles, ``Store.append_cycles``)."""
    path = tmp_path_factory.mktemp("whole") / "g.duckdb"
    start = int(time.time() * 1000) - 300 * 15_000
    names = [f"gpuscope_gpu_utilization_ratio_{i % 20}" for i in range(400)]
    with Store.open(path) as store:
        for n in range(4):
            labels: list[tuple[tuple[str, str], ...]] = [
                (("gpu", str(i)), ("node", f"node-{n}")) for i in range(400)
            ]
            cycles = []
            for k in range(300):
                values = [float((i * 7 + k * 13) % 101) / 100 for i in range(400)]
                scrape = Batch(
                    f"http://n{n}:9835/metrics", start + k * 15_000, names, labels, values
                )
                cycles.append([(scrape, 0.0)])
            store.append_cycles(cycles)
        store.checkpoint()
    assert path.stat().st_size > 1_000_000
    return path


def _used_end(path: Path) -> int:
    """Where the file's last used block ends: the free blocks after it may be cut off
    without loss (DuckDB itself leaves them out after a SIGKILL, test_store_crash.py)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        block = con.execute("PRAGMA database_size").fetchone()[2]  # type: ignore[index]
        tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        last = max(
            con.execute(
                "SELECT coalesce(max(block_id), -1) FROM pragma_storage_info(?)", [t]
            ).fetchone()[0]  # type: ignore[index]
            for t in tables
        )
    finally:
        con.close()
    return int(3 * 4096 + block * (last + 1))


def _cut(whole: Path, tmp_path: Path, share: float) -> Path:
    """A copy cut at ``share`` of its used part."""
    path = tmp_path / "cut.duckdb"
    shutil.copy(whole, path)
    with path.open("r+b") as f:
        f.truncate(int(_used_end(whole) * share))
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in ENV.items() if not k.startswith("GPUSCOPE_")}
    return subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", *args],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip


@pytest.mark.parametrize("share", [0.15, 0.75, 0.99])
def test_collector_check_and_report_refuse_a_truncated_file(
    whole: Path, tmp_path: Path, share: float
) -> None:
    path = _cut(whole, tmp_path, share)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    for args in (
        ("collector", "--check", "--db", str(path), "--kubernetes", "none"),
        ("report", "weekly", "--db", str(path), "--out", str(tmp_path / "out")),
    ):
        proc = _run(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert "truncated" in lines[0] or "damaged" in lines[0], lines[0]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest  # untouched
    assert not (tmp_path / "out").exists()


def test_the_store_refuses_a_truncated_file_read_write_and_read_only(
    whole: Path, tmp_path: Path
) -> None:
    """The collector's own open (read-write) and the commands' (read-only): one line."""
    path = _cut(whole, tmp_path, 0.9)
    for read_only in (True, False):
        with pytest.raises(UserError, match="truncated"):
            Store.open(path, read_only=read_only)


def test_a_whole_file_opens(whole: Path, tmp_path: Path) -> None:
    path = tmp_path / "copy.duckdb"
    shutil.copy(whole, path)
    with Store.open(path, read_only=True) as store:
        assert store.cursor().execute("SELECT count(*) FROM series").fetchone() == (1600,)
    proc = _run("collector", "--check", "--db", str(path), "--kubernetes", "none")
    assert proc.returncode == 0, proc.stderr
