"""Reading the public Alibaba GPU trace (clusterdata ``cluster-trace-gpu-v2023``, "openb").

The trace is what the FGD paper (USENIX ATC '23) evaluates on: a node list
(``sn,cpu_milli,memory_mib,gpu,model``) and a task list (``name,cpu_milli,memory_mib,
num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time]``;
the ``multigpu`` files have only the first five columns). As in the paper's simulator the
cluster is taken as empty and the tasks are the workload: every task is kept, CPU-only ones
included, with its per-GPU share ``gpu_milli / 1000`` and the GPU models ``gpu_spec``
allows (``V100M16|V100M32``; empty means any), kept also as written, since the
simulator's task types are keyed by that text (``V100M16|V100M32|V100M32`` is a type of its
own there). Memory is left out on both sides, as the simulator leaves it out. Nodes are
pooled by GPU model, since the trace's cluster is partitioned that way and
model-constrained jobs see one model at a time.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path

from gpuscope.analytics.placement.allocation import ClusterState, NodeState, Task
from gpuscope.core.errors import UserError

log = logging.getLogger(__name__)

NODE_COLUMNS = ("sn", "cpu_milli", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "num_gpu", "gpu_milli")
#: Pool of the trace's nodes without GPUs.
CPU_POOL = "cpu"


def parse_gpu_spec(spec: str) -> frozenset[str]:
    """``"V100M16|V100M32"`` -> the allowed models; "" or ``nan`` -> any model."""
    if spec.strip().lower() in ("", "nan", "none"):
        return frozenset()
    return frozenset(m.strip() for m in spec.split("|") if m.strip())


def spec_text(spec: str) -> str:
    """The constraint as written, "" for any model (``nan`` in the CSV)."""
    text = spec.strip()
    return "" if text.lower() in ("", "nan", "none") else text


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, Mapping[str, str]]]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"trace file {path} does not exist") from None
    except OSError as exc:
        raise UserError(f"trace file {path} cannot be read: {exc.strerror}") from None
    with handle:
        try:
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if missing:
                raise UserError(f"trace file {path} lacks column(s) {', '.join(missing)}")
            for row in reader:
                yield reader.line_num, row
        except (UnicodeDecodeError, csv.Error) as exc:
            raise UserError(f"trace file {path} is not a readable CSV: {exc}") from None


def _int(path: Path, line: int, row: Mapping[str, str], column: str) -> int:
    text = (row.get(column) or "").strip()
    try:
        value = int(float(text))
    except ValueError:
        raise UserError(f"{path}:{line}: {column} is not a number: {text!r}") from None
    if value < 0:
        raise UserError(f"{path}:{line}: {column} is negative: {value}")
    return value


def read_nodes(path: Path) -> tuple[NodeState, ...]:
    """The trace's nodes, all free."""
    nodes = []
    for line, row in _rows(path, NODE_COLUMNS):
        gpus = _int(path, line, row, "gpu")
        cpu = _int(path, line, row, "cpu_milli")
        model = (row.get("model") or "").strip()
        model = "" if model.lower() == "nan" else model
        nodes.append(
            NodeState(
                name=row["sn"],
                pool=model if gpus else CPU_POOL,
                gpu_model=model,
                gpus=(1.0,) * gpus,
                cpu_milli_free=cpu,
                cpu_milli_total=cpu,
            )
        )
    return tuple(nodes)


def read_tasks(path: Path) -> list[Task]:
    """The trace's tasks; ``gpu_milli`` out of 0..1000 is an error."""
    tasks = []
    for line, row in _rows(path, POD_COLUMNS):
        count = _int(path, line, row, "num_gpu")
        milli = _int(path, line, row, "gpu_milli")
        if milli > 1000:
            raise UserError(f"{path}:{line}: gpu_milli {milli} is over 1000")
        if count == 0:
            share = 0.0
        elif milli == 0:
            share = 1.0  # a GPU task that does not say its share takes whole GPUs
        else:
            share = milli / 1000
        spec = spec_text(row.get("gpu_spec") or "") if count else ""
        tasks.append(
            Task(
                cpu_milli=_int(path, line, row, "cpu_milli"),
                gpu_count=count,
                gpu_share=share,
                gpu_models=parse_gpu_spec(spec),
                name=row["name"],
                gpu_spec=spec,
            )
        )
    return tasks


def read_trace(node_csv: Path, pod_csv: Path) -> tuple[ClusterState, list[Task]]:
    """The empty cluster of ``node_csv`` and the workload of ``pod_csv``."""
    nodes = read_nodes(Path(node_csv))
    tasks = read_tasks(Path(pod_csv))
    if not nodes:
        raise UserError(f"trace file {node_csv} lists no nodes")
    log.debug("trace: %d nodes, %d tasks", len(nodes), len(tasks))
    return ClusterState(nodes=nodes), tasks
