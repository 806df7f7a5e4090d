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
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from typing import Any

from gpuscope.core.kube_names import (
    FRACTION_ANNOTATION,
    GPU_COUNT_LABEL,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    IB_RAIL_LABEL_PREFIX,
    KAI_QUEUE_LABEL,
    KUEUE_API_VERSION,
    KUEUE_QUEUE_LABEL,
    LEAF_LABEL,
    MIG_RESOURCE_PREFIX,
    NOTEBOOK_LABEL,
    POOL_LABEL,
    RACK_LABEL,
)
from gpuscope.sim.behaviour import stable_id
from gpuscope.sim.cluster import BOOT_BEFORE_ORIGIN, SimPod, SimulatedCluster
from gpuscope.sim.dra import is_dra_pod, pod_claims
from gpuscope.sim.scenario import GPU_MODELS, NodeSpec, WorkloadSpec

_FAMILY = {"H100": "hopper", "A100": "ampere"}
_OWNERS = {  # workload kind -> (apiVersion, kind) of the controlling owner
    "interactive": ("apps/v1", "StatefulSet"),
    "training": ("kubeflow.org/v1", "PyTorchJob"),
    "batch": ("batch/v1", "Job"),
    "inference": ("apps/v1", "ReplicaSet"),
}
_READY_CONDITIONS = (
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
)
_IMAGES = {
    "interactive": "kubeflownotebookswg/jupyter-pytorch-cuda-full:v1.9.0",
    "training": "nvcr.io/nvidia/pytorch:24.05-py3",
    "batch": "nvcr.io/nvidia/pytorch:24.05-py3",
    "inference": "nvcr.io/nvidia/tritonserver:24.05-py3",
}


def rfc3339(unix_seconds: float) -> str:
    """``2024-05-01T12:00:00Z``: Kubernetes times have whole seconds."""
    return datetime.fromtimestamp(int(unix_seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def quantity(value: float) -> str:
    """A Kubernetes quantity: ``8`` for whole numbers, ``1500m`` otherwise."""
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def _uid(text: str) -> str:
    key = stable_id(text)
    return str(uuid.UUID(int=key << 64 | (key ^ 0x5A5A5A5A5A5A5A5A)))


def _hex64(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


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
            "uid": _uid(f"{cluster.seed}/node/{spec.name}"),
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
                "bootID": _uid(f"{cluster.seed}/boot/{spec.name}"),
                "containerRuntimeVersion": "containerd://1.7.18",
                "kernelVersion": "5.15.0-112-generic",
                "kubeProxyVersion": "v1.30.2",
                "kubeletVersion": "v1.30.2",
                "machineID": _hex64(spec.name)[:32],
                "operatingSystem": "linux",
                "osImage": "Ubuntu 22.04.4 LTS",
                "systemUUID": _uid(f"{cluster.seed}/system/{spec.name}"),
            },
        },
    }


def nodes_json(cluster: SimulatedCluster, *, origin: float) -> dict[str, Any]:
    """``kubectl get nodes -o json`` for the simulated cluster."""
    return _list(
        [node_json(cluster, spec, i, origin) for i, spec in enumerate(cluster.scenario.nodes)]
    )


# -- pods ---------------------------------------------------------------------------------
def _owner_name(pod: SimPod) -> str:
    w = pod.workload
    if w.kind == "inference":
        return pod.name.rsplit("-", 1)[0]  # the ReplicaSet: <deployment>-<hash>
    return w.name


def _labels(pod: SimPod) -> dict[str, str]:
    w = pod.workload
    labels: dict[str, str] = {}
    if w.kind == "interactive":
        labels |= {
            NOTEBOOK_LABEL: w.name,
            "app": w.name,
            "statefulset": w.name,
            "statefulset.kubernetes.io/pod-name": pod.name,
        }
    elif w.kind == "training":
        labels |= {
            "training.kubeflow.org/job-name": w.name,
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-type": "worker",
            "training.kubeflow.org/replica-index": str(pod.replica),
        }
    elif w.kind == "batch":
        labels |= {"batch.kubernetes.io/job-name": w.name, "job-name": w.name}
    else:
        labels |= {"app": w.name, "pod-template-hash": _owner_name(pod).rsplit("-", 1)[1]}
    if w.kind in ("training", "batch"):
        labels[KUEUE_QUEUE_LABEL] = w.project_name
    if w.gpu_fraction < 1:
        labels[KAI_QUEUE_LABEL] = w.project_name
    if w.project:
        labels["gpuscope.io/project"] = w.project
    if w.preemptible:
        labels["gpuscope.io/preemptible"] = "true"
    return labels | dict(w.labels)


def _mig_profile(cluster: SimulatedCluster, pod: SimPod) -> str:
    if pod.node is not None and cluster.node(pod.node).mig_profile:
        return cluster.node(pod.node).mig_profile
    profiles = [n.mig_profile for n in cluster.scenario.nodes if n.mig_profile]
    return profiles[0] if profiles else "1g.10gb"


def _resources(cluster: SimulatedCluster, pod: SimPod) -> dict[str, Any]:
    w: WorkloadSpec = pod.workload
    # host memory: 96 GiB a whole GPU, a fractional pod its share of that
    gib = 16 + 96 * w.gpus if w.gpu_fraction >= 1 else 8 + round(96 * w.gpu_fraction)
    requests = {"cpu": quantity(w.cpu_milli / 1000), "memory": f"{gib}Gi"}
    limits = {"memory": requests["memory"]}
    extra: dict[str, str] = {}
    if is_dra_pod(cluster, pod):  # the devices come through its claim
        return {
            "requests": requests,
            "limits": limits,
            "claims": pod_claims(cluster, pod)["container"],
        }
    if w.mig:
        extra[MIG_RESOURCE_PREFIX + _mig_profile(cluster, pod)] = "1"
    elif w.gpu_fraction >= 1 and w.gpus:
        extra[GPU_RESOURCE] = str(w.gpus)
    return {"requests": requests | extra, "limits": limits | extra}


def _pod_ip(pod: SimPod) -> str:
    return f"10.{128 + (pod.key >> 16) % 64}.{(pod.key >> 8) % 256}.{1 + pod.key % 254}"


def pod_json(
    cluster: SimulatedCluster, pod: SimPod, *, origin: float, t: float | None = None
) -> dict[str, Any]:
    """One Pod object: Running where the simulator placed it (from its start on, when
    ``t`` is given), else Pending."""
    w = pod.workload
    created = rfc3339(origin + (pod.start if w.arrival is None else w.arrival))
    started = rfc3339(origin + pod.start)
    api_version, owner_kind = _OWNERS[w.kind]
    owner = _owner_name(pod)
    annotations: dict[str, str] = {}
    dra = is_dra_pod(cluster, pod)
    if w.gpu_fraction < 1 and not dra:
        annotations[FRACTION_ANNOTATION] = f"{w.gpu_fraction:g}"
    image = _IMAGES[w.kind]
    container = {
        "name": pod.container,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "resources": _resources(cluster, pod),
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    spec: dict[str, Any] = {
        "containers": [container],
        "restartPolicy": "OnFailure" if w.kind in ("training", "batch") else "Always",
        "schedulerName": "kai-scheduler" if w.gpu_fraction < 1 else "default-scheduler",
        "priority": w.priority,
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
    }
    if not w.preempts:
        spec["preemptionPolicy"] = "Never"
    if w.priority:
        spec["priorityClassName"] = "preemptible" if w.priority < 0 else "high-priority"
    if w.kind == "interactive":
        spec["hostname"] = pod.name
        spec["subdomain"] = w.name
    status: dict[str, Any] = {"qosClass": "Burstable"}
    if pod.node is not None and (t is None or t >= pod.start):
        spec["nodeName"] = pod.node
        node_index = cluster.node_names.index(pod.node)
        status |= {
            "phase": "Running",
            "hostIP": f"10.0.{node_index // 250}.{node_index % 250 + 1}",
            "podIP": _pod_ip(pod),
            "startTime": started,
            "conditions": [
                {"type": c, "status": "True", "lastTransitionTime": started}
                for c in _READY_CONDITIONS
            ],
            "containerStatuses": [
                {
                    "name": pod.container,
                    "image": image,
                    "imageID": f"{image.split(':')[0]}@sha256:{_hex64(image)}",
                    "containerID": f"containerd://{_hex64(f'{pod.uid}/{pod.container}')}",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": started}},
                }
            ],
        }
    else:
        n = len(cluster.node_names)
        status |= {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": f"0/{n} nodes are available: {n} Insufficient {GPU_RESOURCE}. "
                    f"preemption: 0/{n} nodes are available: {n} No preemption victims "
                    "found for incoming pod.",
                    "lastTransitionTime": created,
                }
            ],
        }
    metadata: dict[str, Any] = {
        "name": pod.name,
        "namespace": w.namespace,
        "uid": pod.uid,
        "creationTimestamp": created,
        "labels": _labels(pod),
        "ownerReferences": [
            {
                "apiVersion": api_version,
                "kind": owner_kind,
                "name": owner,
                "uid": _uid(f"{cluster.seed}/{w.namespace}/{owner_kind}/{owner}"),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if w.kind == "inference":
        metadata["generateName"] = f"{owner}-"
    annotations |= dict(w.annotations)
    if annotations:
        metadata["annotations"] = annotations
    if dra:
        claims = pod_claims(cluster, pod)
        spec |= claims["spec"]
        status |= claims["status"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def pods_json(cluster: SimulatedCluster, t: float, *, origin: float) -> dict[str, Any]:
    """``kubectl get pods -A -o json`` at time t: running pods and pending ones."""
    # submitted (Pending while it waits for room), not ended, not removed by an actuator
    listed = [p for p in cluster.pods if cluster.is_listed(p, t)]
    return _list([pod_json(cluster, p, origin=origin, t=t) for p in listed])


# -- namespaces and quotas ------------------------------------------------------------------
def namespaces_json(cluster: SimulatedCluster) -> dict[str, Any]:
    """The namespaces the scenario's workloads and projects use."""
    names: set[str] = {w.namespace for w in cluster.scenario.workloads}
    for p in cluster.scenario.projects:
        names.update(p.namespaces or (p.name,))
    return _list(
        [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": name,
                    "uid": _uid(f"{cluster.seed}/namespace/{name}"),
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
                "metadata": {"name": p.name, "uid": _uid(f"{cluster.seed}/cq/{p.name}")},
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
    return _list(items)
