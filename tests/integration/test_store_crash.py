"""Crash safety of the store: a writer SIGKILLed mid-stream loses no acknowledged batch."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuscope.collector.storage.store import Store

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
BATCH = 2_000

# The writer: append batches of BATCH series in a loop, printing the acknowledged total
# after each commit. A small WAL threshold makes DuckDB checkpoint every few batches, so
# kills land in commits, in checkpoints and between them.
CHILD = """
import sys
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store

path, size = sys.argv[1], int(sys.argv[2])
store = Store.open(path)
store.cursor().execute("SET checkpoint_threshold = '512KB'")
names = ["gpuscope_gpu_energy_joules_total"] * size
labels = [(("gpu", str(i % 8)), ("node", f"n{i // 8}"), ("uuid", f"GPU-{i}")) for i in range(size)]
types = {"gpuscope_gpu_energy_joules": "counter"}
i = store.samples_stored() // size
while True:
    i += 1
    values = [float(i * 100 + j) for j in range(size)]
    store.append_scrape(Batch("t", 1_700_000_000_000 + i * 15_000, names, labels, values, types))
    print(store.samples_stored(), flush=True)
"""


def run_until_killed(db: Path, acks_before_kill: int, rng: random.Random) -> int:
    """Start the writer, SIGKILL it after some acknowledgements; the last total it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), str(BATCH)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    acked = 0
    try:
        for _ in range(acks_before_kill):
            line = proc.stdout.readline()
            assert line, f"writer died early: {proc.stderr.read() if proc.stderr else ''}"
            acked = int(line)
        time.sleep(rng.uniform(0, 0.05))  # land somewhere inside a later batch
    finally:
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    printed = [int(x) for x in out.split()]
    return max([acked, *printed])


def test_sigkilled_writer_keeps_every_acknowledged_batch_and_no_half_batch(tmp_path: Path) -> None:
    """Three SIGKILLs of a real writer process: after each, reopening the file finds every
    acknowledged row, a whole number of batches (no half batch), a persisted
    samples_stored equal to the rows there, and the writer carries on from it."""
    db = tmp_path / "crash.duckdb"
    rng = random.Random(20250303)
    for round_ in range(3):
        last_acked = run_until_killed(db, acks_before_kill=rng.randint(40, 120), rng=rng)
        with Store.open(db) as store:
            (count,) = store.cursor().execute("SELECT count(*) FROM samples").fetchone() or (0,)
            assert count >= last_acked, f"round {round_}: lost acknowledged rows"
            assert count % BATCH == 0, f"round {round_}: half a batch ({count} rows)"
            assert store.samples_stored() == count
            (series,) = store.cursor().execute("SELECT count(*) FROM series").fetchone() or (0,)
            assert series == BATCH
            # Counters continue across the crash: every stored increase is 0 or 100.
            bad = (
                store.cursor()
                .execute("SELECT count(*) FROM samples WHERE value NOT IN (0, 100)")
                .fetchone()
            )
            assert bad == (0,)
