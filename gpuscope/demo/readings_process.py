"""The demo history's readings computed in a helper process, beside the store's writes.

Why: the history's fill was one thread. The readings (:func:`~gpuscope.demo.readings_fast.
fast_frames`, numpy and Python: about 13 s of the demo's week) and the store's writes with
the inventory records (about 19 s) took turns on one core while the machine's other core
waited. Here a helper interpreter (``python -m gpuscope.demo.readings_process``) computes
the frames a run of times at a time and hands each run over a pipe while this process
stores the run before it, so the fill takes about as long as the longer of the two.

The helper gets the simulated cluster itself (pickled: pods removed by an action included)
and computes exactly what :func:`fast_frames` computes here (tests/integration/
test_demo_readings_process.py compares them). Runs are pickled one at a time and the pipe holds
less than one, so at most about two runs of frames exist at once, as in one process. Its
imports are numpy and the simulator's (some 35 MB resident); it ends with the last run,
and is killed when the caller stops iterating early.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import tempfile
from collections.abc import Generator, Sequence
from typing import IO

from gpuscope.demo.readings import NodeFrame
from gpuscope.demo.readings_fast import fast_frames
from gpuscope.sim import SimulatedCluster

__all__ = ["frames_in_helper"]


def frames_in_helper(
    cluster: SimulatedCluster, nodes: Sequence[str], times: Sequence[float], run: int
) -> Generator[list[NodeFrame], None, None]:
    """:func:`fast_frames` (the same arguments, the same frames in the same order),
    computed in a helper process a run ahead of the caller.

    Raises :class:`RuntimeError` with the helper's last error line if it fails."""
    runs = -(-len(times) // max(1, run))
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        try:
            # the helper reads its whole input before it writes, so this cannot block on it
            try:
                pickle.dump((cluster, list(nodes), list(times), run), proc.stdin, protocol=5)
                proc.stdin.close()
            except BrokenPipeError:  # it ended before reading it (it could not start)
                proc.wait()
                raise RuntimeError(
                    f"the readings' helper process ended early: {_last_line(err)}"
                ) from None
            for _ in range(runs):
                yield from _next_run(proc.stdout, err)
            if proc.wait() != 0:
                raise RuntimeError(f"the readings' helper process failed: {_last_line(err)}")
        finally:
            if proc.poll() is None:  # the caller stopped early, or an error above
                proc.kill()
                proc.wait()
            proc.stdout.close()


def _next_run(out: IO[bytes], err: IO[bytes]) -> list[list[NodeFrame]]:
    try:
        # our own helper's output, over a pipe only this process holds
        frames: list[list[NodeFrame]] = pickle.load(out)  # noqa: S301
    except EOFError:
        raise RuntimeError(f"the readings' helper process ended early: {_last_line(err)}") from None
    return frames


def _last_line(err: IO[bytes]) -> str:
    err.seek(0)
    lines = err.read().decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no error output"


def _serve(source: IO[bytes], sink: IO[bytes]) -> None:
    """The helper's side: read the cluster and the times, write each run's frames."""
    cluster, nodes, times, run = pickle.load(source)  # noqa: S301 (the parent's pipe)
    batch: list[list[NodeFrame]] = []
    for frame in fast_frames(cluster, nodes, times, run):
        batch.append(frame)
        if len(batch) == run:
            pickle.dump(batch, sink, protocol=5)
            sink.flush()
            batch = []
    if batch:
        pickle.dump(batch, sink, protocol=5)
        sink.flush()


if __name__ == "__main__":
    _serve(sys.stdin.buffer, sys.stdout.buffer)
