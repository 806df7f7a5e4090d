"""The simulated cluster as Kubernetes objects, as the API server (or kubectl) returns them.

``nodes_json`` and ``pods_json`` give what ``kubectl get nodes -o json`` and ``kubectl get
pods -A -o json`` would print for a :class:`~sim.SimulatedCluster` at a time;
``quotas_json`` gives the scenario's projects as Kueue ClusterQueues. Node labels follow
NVIDIA's GPU feature discovery (``nvidia.com/gpu.product``...) and the label names of
:mod:`gpuscope.core.kube_names`, which the collector's inventory reads back. Times are
seconds on the scenario's timeline; ``origin`` (unix seconds) places them on the
wall clock.

The pods follow the owner chains of the real controllers: a Kubeflow notebook's pod is owned
by a StatefulSet and labelled ``notebook-name`` (so :mod:`gpuscope.core.workload` sees it as
interactive), training pods by a PyTorchJob, batch pods by a Job, inference pods by a
ReplicaSet. Fractional pods carry the ``gpu-fraction`` annotation that KAI/Run:ai read and
request no ``nvidia.com/gpu``; MIG pods request ``nvidia.com/mig-<profile>``.

The pods' objects are built in gpuscope/sim/kube_pods.py, the values every object
writes the same way (times, quantities, uids) in gpuscope/sim/kube_values.py.
"""

from __future__ import annotations

from typing import Any

from gpuscope.core.kube_names import (
    GPU_COUNT_LABEL,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    IB_RAIL_LABEL_PREFIX,
    KUEUE_API_VERSION,
    LEAF_LABEL,
    MIG_RESOURCE_PREFIX,
    POOL_LABEL,
    RACK_LABEL,
)
from gpuscope.sim.cluster import BOOT_BEFORE_ORIGIN, SimulatedCluster
from gpuscope.sim.kube_values import as_list, hex64, quantity, rfc3339, uid
from gpuscope.sim.scenario import GPU_MODELS, NodeSpec

_FAMILY = {"H100": "hopper", "A100": "ampere"}


# -- nodes --------------------------------------------------------------------------------
def node_json(
    cluster: SimulatedCluster, spec: NodeSpec, index: int, origin: float
) -> dict[str, Any]:
    """One Node object."""
    model = GPU_MODELS[spec.gpu_model]
    labels = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": spec.name,
        "node.kubernetes.io/instance-type": f"{spec.gpu_model.lower()}x{spec.gpus}",
        "nvidia.com/gpu.present": "true",
        GPU_PRODUCT_LABEL: model.name.replace(" ", "-"),
        GPU_COUNT_LABEL: str(spec.gpus),
        GPU_MEMORY_LABEL: str(model.memory_bytes // 2**20),
        "nvidia.com/gpu.family": _FAMILY.get(spec.gpu_model, "unknown"),
        "nvidia.com/mig.capable": "true",
        POOL_LABEL: spec.pool,
    }
    if spec.rack:
        labels[RACK_LABEL] = spec.rack
    if spec.leaf:
        labels[LEAF_LABEL] = spec.leaf
    if spec.ib_ports:
        labels["feature.node.kubernetes.io/rdma.available"] = "true"
        labels["gpuscope.io/ib-rate-gbps"] = quantity(spec.ib_rate_gbps)
        for port in range(spec.ib_ports):
            labels[f"{IB_RAIL_LABEL_PREFIX}{port}"] = f"mlx5_{port}"
    resources = {
        "cpu": quantity(spec.cpu_milli / 1000),
        "memory": "2113638400Ki",
        "ephemeral-storage": "3748905984Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "pods": "110",
    }
    if spec.dra:  # GPUs through DRA only: ResourceSlices (gpuscope/sim/dra.py)
        labels.pop(GPU_COUNT_LABEL)
        labels["nvidia.com/gpu.deploy.device-plugin"] = "false"
        labels["nvidia.com/dra-kubelet-plugin"] = "true"
    elif spec.mig_profile:
        per_gpu = len(cluster.mig_instances(spec))
        labels["nvidia.com/mig.strategy"] = "mixed"
        labels["nvidia.com/mig.config"] = f"all-{spec.mig_profile}"
        labels[f"nvidia.com/mig-{spec.mig_profile}.count"] = str(per_gpu * spec.gpus)
        resources[MIG_RESOURCE_PREFIX + spec.mig_profile] = str(per_gpu * spec.gpus)
    else:
        resources[GPU_RESOURCE] = str(spec.gpus)
    allocatable = dict(resources, memory="2111541248Ki")
    booted = rfc3339(origin - BOOT_BEFORE_ORIGIN)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "uid": uid(f"{cluster.seed}/node/{spec.name}"),
            "creationTimestamp": booted,
            "labels": labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": f"10.{100 + index // 250}.{index % 250}.0/24"},
        "status": {
            "capacity": resources,
            "allocatable": allocatable,
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{index // 250}.{index % 250 + 1}"},
                {"type": "Hostname", "address": spec.name},
            ],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": booted,
                    "lastTransitionTime": booted,
                }
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": uid(f"{cluster.seed}/boot/{spec.name}"),
                "containerRuntimeVersion": "containerd://1.7.18",
                "kernelVersion": "5.15.0-112-generic",
                "kubeProxyVersion": "v1.30.2",
                "kubeletVersion": "v1.30.2",
                "machineID": hex64(spec.name)[:32],
                "operatingSystem": "linux",
                "osImage": "Ubuntu 22.04.4 LTS",
                "systemUUID": uid(f"{cluster.seed}/system/{spec.name}"),
            },
        },
    }


def nodes_json(cluster: SimulatedCluster, *, origin: float) -> dict[str, Any]:
    """``kubectl get nodes -o json`` for the simulated cluster."""
    return as_list(
        [node_json(cluster, spec, i, origin) for i, spec in enumerate(cluster.scenario.nodes)]
    )


# -- namespaces and quotas ------------------------------------------------------------------
def namespaces_json(cluster: SimulatedCluster) -> dict[str, Any]:
    """The namespaces the scenario's workloads and projects use."""
    names: set[str] = {w.namespace for w in cluster.scenario.workloads}
    for p in cluster.scenario.projects:
        names.update(p.namespaces or (p.name,))
    return as_list(
        [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": name,
                    "uid": uid(f"{cluster.seed}/namespace/{name}"),
                    "labels": {"kubernetes.io/metadata.name": name},
                },
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }
            for name in sorted(names)
        ]
    )


def quotas_json(cluster: SimulatedCluster) -> dict[str, Any]:
    """The projects' guarantees as Kueue ClusterQueues, one cohort for the whole cluster.

    ``nominalQuota`` is the guarantee; ``borrowingLimit`` lets a project borrow every GPU
    the others do not use.
    """
    total = sum(n.gpus for n in cluster.scenario.nodes if not n.mig_profile)
    items = []
    for p in cluster.scenario.projects:
        namespaces = list(p.namespaces or (p.name,))
        resource = {
            "name": GPU_RESOURCE,
            "nominalQuota": quantity(p.guaranteed_gpus),
            "borrowingLimit": quantity(max(0.0, total - p.guaranteed_gpus)),
        }
        items.append(
            {
                "apiVersion": KUEUE_API_VERSION,
                "kind": "ClusterQueue",
                "metadata": {"name": p.name, "uid": uid(f"{cluster.seed}/cq/{p.name}")},
                "spec": {
                    "cohort": "gpu-cluster",
                    "namespaceSelector": {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/metadata.name",
                                "operator": "In",
                                "values": namespaces,
                            }
                        ]
                    },
                    "queueingStrategy": "BestEffortFIFO",
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU_RESOURCE],
                            "flavors": [{"name": "gpu", "resources": [resource]}],
                        }
                    ],
                    "preemption": {
                        "reclaimWithinCohort": "Any",
                        "withinClusterQueue": "LowerPriority",
                    },
                },
            }
        )
    return as_list(items)
