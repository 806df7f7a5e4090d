"""Issue 37, "``analyze topology`` ignores DRA GPUs": a node with 8 H100s in a leaf counts
the same whether the GPUs come from the device plugin (``nvidia.com/gpu: 8``) or from a
complete ResourceSlice with NVIDIA's DeviceClasses: 8 free GPUs and one 8-GPU slot per
leaf, and with two such leaves a pending 2 x 8 pod group that must stay in one leaf (asking
through a claim template in the DRA twin) is blocked by topology: the cluster's 16 free
GPUs cover it, no leaf does."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuscope.analytics.domains.topology_inputs import topology_from_files
from gpuscope.core.kube_objects import ObjectSet
from gpuscope.core.settings import Settings
from tests.fakes import dra_objects as d
from tests.unit.kubectl_topology import LEAF, kube_list, node, pod
from tests.unit.test_dra import H100, objset

AT = datetime(2026, 1, 6, tzinfo=UTC)


def twin(dra: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]], ObjectSet]:
    nodes = [node("n1", "leaf-a", gpus=8), node("n2", "leaf-b", gpus=8)]
    group = [pod(f"w{i}", 8, group="g", group_count=2, required=LEAF) for i in range(2)]
    if not dra:
        return nodes, group, ObjectSet()
    for n in nodes:
        for res in ("capacity", "allocatable"):
            del n["status"][res]["nvidia.com/gpu"]
    for p in group:  # the same 8 GPUs each, asked through a claim template
        main = p["spec"]["containers"][0]["resources"]
        del main["requests"]["nvidia.com/gpu"], main["limits"]["nvidia.com/gpu"]
        main["claims"] = [{"name": "gpus"}]
        p["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "eight"}]
    objects = objset(
        *d.nvidia_classes(),
        *(
            d.resource_slice(n, [d.gpu_device(i, f"GPU-{n}-{i}", H100) for i in range(8)])
            for n in ("n1", "n2")
        ),
        d.template("ml", "eight", [d.request("gpus", "gpu.nvidia.com", count=8)]),
    )
    return nodes, group, objects


@pytest.mark.parametrize("dra", [False, True], ids=["device-plugin", "dra"])
def test_dra_gpus_count_in_topology_as_device_plugin_gpus(tmp_path: Path, dra: bool) -> None:
    nodes, pods, objects = twin(dra)
    (tmp_path / "nodes.json").write_text(json.dumps(kube_list(nodes)))
    (tmp_path / "pods.json").write_text(json.dumps(kube_list(pods)))
    out = topology_from_files(
        tmp_path / "nodes.json", tmp_path / "pods.json", objects, at=AT, settings=Settings()
    ).summary
    leaf = out["levels"][LEAF]
    assert leaf["domains"]["leaf-a"]["free_gpus"] == 8
    assert leaf["domains"]["leaf-b"]["free_gpus"] == 8
    assert leaf["slots"]["8"] == 2 and leaf["slots"]["16"] == 0
    assert out["free_gpus"] == 16
    assert (out["pod_groups"], out["blocked_pod_groups"]) == (1, 1)
