"""Reading the public Alibaba GPU trace (cluster-trace-gpu-v2023)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscope.analytics.placement.allocation import Task
from gpuscope.analytics.trace import parse_gpu_spec, read_trace
from gpuscope.core.errors import UserError
from tests.paths import TRACE_CSV

CSV = TRACE_CSV


def test_gpu_nodes_match_provenance() -> None:
    state, _ = read_trace(CSV / "openb_node_list_gpu_node.csv", CSV / "openb_pod_list_cpu0.csv")
    assert len(state.nodes) == 1213
    assert sum(len(n.gpus) for n in state.nodes) == 6212
    assert all(n.free_gpus == len(n.gpus) for n in state.nodes)  # the cluster starts empty
    by_model: dict[str, int] = {}
    for n in state.nodes:
        by_model[n.gpu_model] = by_model.get(n.gpu_model, 0) + len(n.gpus)
    assert by_model["G2"] == 549 * 8
    assert by_model["T4"] == 387 * 2 + 17 * 4
    assert state.nodes[0].pool == state.nodes[0].gpu_model


def test_all_nodes_include_cpu_only_ones() -> None:
    state, _ = read_trace(CSV / "openb_node_list_all_node.csv", CSV / "openb_pod_list_cpu0.csv")
    assert len(state.nodes) == 1523
    assert sum(1 for n in state.nodes if not n.gpus) == 310


@pytest.mark.parametrize(
    ("name", "count"),
    [("default", 8152), ("gpushare100", 8152), ("multigpu50", 9061), ("cpu0", 7064)],
)
def test_task_counts(name: str, count: int) -> None:
    _, tasks = read_trace(CSV / "openb_node_list_gpu_node.csv", CSV / f"openb_pod_list_{name}.csv")
    assert len(tasks) == count


def test_default_tasks_as_provenance_describes() -> None:
    _, tasks = read_trace(CSV / "openb_node_list_gpu_node.csv", CSV / "openb_pod_list_default.csv")
    counts: dict[int, int] = {}
    for t in tasks:
        counts[t.gpu_count] = counts.get(t.gpu_count, 0) + 1
    assert counts == {0: 1088, 1: 6989, 2: 16, 4: 15, 8: 44}
    assert tasks[1] == Task(6000, 1, 0.46, frozenset(), "openb-pod-0001")  # gpu_milli 460
    assert all(t.gpu_share == 0.0 for t in tasks if t.gpu_count == 0)  # CPU-only kept
    assert all(t.gpu_share == 1.0 for t in tasks if t.gpu_count > 1)


def test_gpu_spec_constrains_models() -> None:
    _, tasks = read_trace(
        CSV / "openb_node_list_gpu_node.csv", CSV / "openb_pod_list_gpuspec33.csv"
    )
    constrained = [t for t in tasks if t.gpu_models]
    assert len(constrained) == 8152 - 5764
    assert frozenset({"V100M16", "V100M32"}) in {t.gpu_models for t in constrained}


def test_parse_gpu_spec() -> None:
    assert parse_gpu_spec("V100M16|V100M32|V100M32") == frozenset({"V100M16", "V100M32"})
    assert parse_gpu_spec("") == frozenset()
    assert parse_gpu_spec("nan") == frozenset()


def _write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def test_bad_files_are_one_line_user_errors(tmp_path: Path) -> None:
    nodes = _write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\nx,1000,1,2,T4\n")
    pods = _write(tmp_path, "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,500\n")
    state, tasks = read_trace(nodes, pods)
    assert state.nodes[0].gpus == (1.0, 1.0) and tasks[0].gpu_share == 0.5
    cases = [
        (tmp_path / "missing.csv", pods, "does not exist"),
        (_write(tmp_path, "a.csv", "sn,gpu\nx,1\n"), pods, "lacks column"),
        (
            nodes,
            _write(tmp_path, "b.csv", "name,cpu_milli,num_gpu,gpu_milli\np,1,one,5\n"),
            "num_gpu is not a number",
        ),
        (
            nodes,
            _write(tmp_path, "c.csv", "name,cpu_milli,num_gpu,gpu_milli\np,1,1,1500\n"),
            "over 1000",
        ),
    ]
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00garbage")
    cases.append((tmp_path / "bin.csv", pods, "not a readable CSV"))
    for node_csv, pod_csv, message in cases:
        with pytest.raises(UserError, match=message) as err:
            read_trace(node_csv, pod_csv)
        assert "\n" not in str(err.value)
