"""What the scheduler counts, read from Kubernetes objects: a pod's CPU, memory and storage
requests (containers, init containers, overhead), its tolerations and GPU-model pinning;
a node's allocatable memory and storage, and its hard taints."""

from __future__ import annotations

from dataclasses import replace

from gpuscope.analytics.placement.allocation import NodeState, Task, fits
from gpuscope.collector.cluster.inventory_records import node_from_json, pod_from_json
from gpuscope.collector.cluster.scheduling_rules import tolerates


def test_pod_requests_as_the_scheduler_counts_them() -> None:
    pod = pod_from_json(
        {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "containers": [
                    {"resources": {"requests": {"cpu": "1500m", "memory": "2Gi"}}},
                    # limits only: the request defaults to the limit
                    {"resources": {"limits": {"cpu": "2", "memory": "1Gi"}}},
                ],
                # an init container larger than the containers' sum sets the request
                "initContainers": [{"resources": {"requests": {"cpu": "8"}}}],
                "overhead": {"cpu": "250m", "memory": "512Mi"},
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
                    {"key": "soft", "operator": "Exists", "effect": "PreferNoSchedule"},
                ],
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100"},
            },
            "status": {"phase": "Pending"},
        }
    )
    assert pod.cpu_milli == 8250
    assert pod.memory_mib == 3 * 1024 + 512
    assert pod.tolerations == ("nvidia.com/gpu|Exists||NoSchedule",)
    assert pod.gpu_spec == "NVIDIA-A100"


def test_required_node_affinity_pins_gpu_models() -> None:
    term = {
        "matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A", "B"]}
        ]
    }
    pod = pod_from_json(
        {
            "metadata": {"name": "p"},
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [term]
                        }
                    }
                }
            },
        }
    )
    assert pod.gpu_spec == "A|B"


def test_node_memory_storage_and_hard_taints() -> None:
    node = node_from_json(
        {
            "metadata": {"name": "n"},
            "spec": {
                "taints": [
                    {"key": "dedicated", "value": "infer", "effect": "NoSchedule"},
                    {"key": "soft", "effect": "PreferNoSchedule"},
                    {"key": "drain", "effect": "NoExecute"},
                ]
            },
            "status": {
                "allocatable": {"cpu": "64", "memory": "256Gi", "ephemeral-storage": "100Gi"}
            },
        }
    )
    assert (node.cpu_milli, node.memory_mib, node.ephemeral_mib) == (64000, 262144, 102400)
    assert node.taints == ("dedicated=infer:NoSchedule", "drain:NoExecute")


def test_toleration_rules() -> None:
    assert tolerates(["dedicated|Equal|infer|NoSchedule"], "dedicated=infer:NoSchedule")
    assert not tolerates(["dedicated|Equal|train|NoSchedule"], "dedicated=infer:NoSchedule")
    assert tolerates(["dedicated|Exists||"], "dedicated=infer:NoExecute")  # any effect
    assert not tolerates(["dedicated|Exists||NoSchedule"], "dedicated=infer:NoExecute")
    assert tolerates(["|Exists||"], "anything=at:NoSchedule")  # tolerates everything
    assert not tolerates([], "drain:NoExecute")


def test_fits_needs_every_resource_and_toleration() -> None:
    node = NodeState(
        "n",
        gpus=(1.0,),
        cpu_milli_free=4000,
        cpu_milli_total=8000,
        memory_mib_free=1024,
        memory_mib_total=8192,
        taints=frozenset({"dedicated=infer:NoSchedule"}),
    )
    ok = Task(
        cpu_milli=4000,
        gpu_count=1,
        gpu_share=1.0,
        memory_mib=1024,
        tolerations=frozenset({"dedicated|Equal|infer|NoSchedule"}),
    )
    assert fits(node, ok)
    assert not fits(node, replace(ok, tolerations=frozenset()))
    assert not fits(node, replace(ok, memory_mib=1025))
    assert not fits(node, replace(ok, cpu_milli=4001))
    # memory not reported by the node (total 0): not counted, as in the trace
    blind = NodeState("b", gpus=(1.0,), cpu_milli_free=4000, cpu_milli_total=4000)
    assert fits(blind, Task(cpu_milli=4000, gpu_count=1, gpu_share=1.0, memory_mib=10**6))
