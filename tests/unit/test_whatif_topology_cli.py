"""`gpuscope whatif` shows the topology-aware replay beside today's policies, on kubectl
files (domains from node labels or a Kueue Topology in --objects) and on a stored week."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuscope.cli.main import main
from tests.unit.kubectl_topology import LEAF, RACK, node, pod, write

#: Two leaves of two 8-GPU nodes. Four single 4-GPU pods started first, then a pending Kueue
#: pod group of 2 x 8 GPUs that must stay in one leaf. Spreading (LeastAllocated) leaves 4
#: GPUs on every node: the group fits nowhere. Packing fills leaf a first: leaf b holds it.
NODES = [node("a1", "leaf-a"), node("a2", "leaf-a"), node("b1", "leaf-b"), node("b2", "leaf-b")]
PODS = [
    *[pod(f"single-{i}", 4, node_name=n, job=f"single-{i}", kind="batch",
          started=f"2026-01-05T08:0{i}:00Z")
      for i, n in enumerate(["a1", "a1", "a2", "a2"])],
    *[pod(f"train-{i}", 8, group="train", group_count=2, required=LEAF,
          started="2026-01-05T09:00:00Z") for i in range(2)],
]  # fmt: skip


def run(argv: list[str], capsys: Any) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["whatif", *argv, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_files_show_per_policy_multi_node_jobs_inside_one_leaf(tmp_path: Path, capsys: Any) -> None:
    out = run(write(tmp_path, NODES, PODS), capsys)
    assert "fgd" in out["policies"]  # today's table is still there
    topo = out["topology"]
    s = topo["summary"]
    assert (s["level"], s["level_source"], s["domains"]) == (LEAF, "labels", 2)
    assert (s["jobs"], s["multi_node_jobs"]) == (5, 1)
    p = topo["policies"]
    assert p["leastallocated"]["multi_node_started"] == 0
    assert p["leastallocated"]["multi_node_never_started"] == 1
    for aware in ("tas-bestfit", "kai-fullest"):
        assert p[aware]["multi_node_in_one_domain"] == 1, p[aware]
        assert p[aware]["multi_node_spread"] == 0
    # blind packing also lands it in leaf b here (the first policy with the most is named)
    assert p["mostallocated"]["multi_node_in_one_domain"] == 1
    assert s["most_multi_node_in_one_domain"] == "mostallocated"


def test_text_output_has_the_topology_table(tmp_path: Path, capsys: Any) -> None:
    capsys.readouterr()
    assert main(["whatif", *write(tmp_path, NODES, PODS)]) == 0
    text = capsys.readouterr().out
    assert f"each kept inside one domain of {LEAF}" in text
    row = next(line for line in text.splitlines() if line.startswith("tas-bestfit"))
    assert row.split()[1:3] == ["1", "1"]  # started, inside one domain


def test_kueue_topology_object_gives_the_domains(tmp_path: Path, capsys: Any) -> None:
    """With a Kueue Topology in --objects its levels are the domains (named by path), as
    `analyze topology` resolves them; the group's required label is one of its levels."""
    topo = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology",
            "metadata": {"name": "dc"},
            "spec": {"levels": [{"nodeLabel": LEAF}, {"nodeLabel": "kubernetes.io/hostname"}]}}  # fmt: skip
    (tmp_path / "topo.json").write_text(json.dumps(topo))
    out = run([*write(tmp_path, NODES, PODS), "--objects", str(tmp_path / "topo.json")], capsys)
    assert out["topology"]["summary"]["level_source"] == "kueue:Topology/dc"
    assert out["topology"]["policies"]["tas-bestfit"]["multi_node_in_one_domain"] == 1


def test_unknown_topology_level_is_one_clear_error(tmp_path: Path, capsys: Any) -> None:
    argv = ["whatif", *write(tmp_path, NODES, PODS), "--topology-level", "no/such"]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "--topology-level no/such: no such level" in err and "Traceback" not in err


def test_domain_resolution_is_analyze_topologys(tmp_path: Path, capsys: Any) -> None:
    """The same levels as `gpuscope analyze topology` on the same files."""
    files = write(tmp_path, NODES, PODS)
    capsys.readouterr()
    assert main(["analyze", "topology", *files, "--json", "--at", "2026-01-05T10:00:00Z"]) == 0
    levels = json.loads(capsys.readouterr().out)["summary"]["levels"]
    out = run(files, capsys)
    assert out["topology"]["summary"]["level"] in levels
    assert out["topology"]["summary"]["domains"] == len(levels[LEAF]["domains"])


def test_topology_level_option_picks_another_level(tmp_path: Path, capsys: Any) -> None:
    """Both leaves in one rack, nodes n1 (leaf a), n2 (leaf b), n3 (a), n4 (b): LeastAllocated
    puts the group's pods on n1 and n2 (the first with the most free GPUs), spread over the
    leaves but inside the rack."""
    nodes = [node(f"n{i}", "leaf-a" if i % 2 else "leaf-b", rack="r1") for i in range(1, 5)]
    pods = [p for p in PODS if p["metadata"]["name"].startswith("train")]
    default = run(write(tmp_path, nodes, pods), capsys)["topology"]
    assert default["summary"]["level"] == LEAF  # what the group requires
    out = run([*write(tmp_path, nodes, pods), "--topology-level", RACK], capsys)["topology"]
    assert (out["summary"]["level"], out["summary"]["domains"]) == (RACK, 1)
    assert out["policies"]["leastallocated"]["multi_node_in_one_domain"] == 1
    assert default["policies"]["leastallocated"]["multi_node_spread"] == 1


def test_a_replay_where_no_policy_keeps_a_group_in_one_domain_says_so(
    tmp_path: Path, capsys: Any
) -> None:
    """A group of 3 x 8 GPUs that must stay in one two-node leaf starts under no policy:
    the text says so in words (it printed 'None' as the best policy)."""
    pods = [pod(f"big-{i}", 8, group="big", group_count=3, required=LEAF,
                started="2026-01-05T09:00:00Z") for i in range(3)]  # fmt: skip
    capsys.readouterr()
    assert main(["whatif", *write(tmp_path, NODES, pods)]) == 0
    text = capsys.readouterr().out
    assert "no policy started a multi-node job inside one domain in this replay" in text
    assert "None" not in text
