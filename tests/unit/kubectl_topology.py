"""kubectl JSON for the topology tests, field for field as ``kubectl get nodes/pods -o json``
prints them (core/v1 Node and Pod): nodes labelled with a leaf switch, pods of Kueue plain
pod groups (``kueue.x-k8s.io/pod-group-name`` label, ``pod-group-total-count`` and
``podset-required-topology`` annotations, the ``kueue.x-k8s.io/admission`` scheduling gate
and ``kueue.x-k8s.io/managed`` finalizer Kueue sets on a group not admitted) and single pods of
Jobs (``ownerReferences`` of kind Job)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LEAF = "topology.gpuscope.io/leaf"
CREATED = "2026-01-05T08:00:00Z"


RACK = "topology.kubernetes.io/rack"


def node(name: str, leaf: str, gpus: int = 8, rack: str = "") -> dict[str, Any]:
    res = {"cpu": "128", "memory": "2063937200Ki", "ephemeral-storage": "1844284Mi",
           "nvidia.com/gpu": str(gpus), "pods": "110"}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1000",
            "creationTimestamp": CREATED,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": str(gpus),
                LEAF: leaf,
                **({RACK: rack} if rack else {}),
            },
            "annotations": {},
        },
        "spec": {"providerID": f"kind://docker/gpu/{name}"},
        "status": {
            "capacity": dict(res),
            "allocatable": dict(res),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": CREATED,
                    "lastTransitionTime": CREATED,
                },
            ],
            "nodeInfo": {"kubeletVersion": "v1.31.2", "architecture": "amd64"},
        },
    }


def pod(
    name: str,
    gpus: int,
    *,
    node_name: str | None = None,
    started: str = CREATED,
    group: str = "",
    group_count: int = 0,
    required: str = "",
    preferred: str = "",
    job: str = "",
    kind: str = "training",
    namespace: str = "ml",
) -> dict[str, Any]:
    labels: dict[str, str] = {"gpuscope.io/workload-type": kind}
    annotations: dict[str, str] = {}
    owners: list[dict[str, Any]] = []
    if group:
        labels |= {
            "kueue.x-k8s.io/pod-group-name": group,
            "kueue.x-k8s.io/queue-name": "ml-queue",
            "kueue.x-k8s.io/managed": "true",
        }
        annotations["kueue.x-k8s.io/pod-group-total-count"] = str(group_count)
        if required:
            annotations["kueue.x-k8s.io/podset-required-topology"] = required
        if preferred:
            annotations["kueue.x-k8s.io/podset-preferred-topology"] = preferred
    if job:
        labels |= {"batch.kubernetes.io/job-name": job, "job-name": job}
        owners.append({"apiVersion": "batch/v1", "kind": "Job", "name": job,
                       "uid": f"uid-job-{job}", "controller": True,
                       "blockOwnerDeletion": True})  # fmt: skip
    if kind in ("training", "batch"):
        labels["gpuscope.io/preemptible"] = "true"
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "nvcr.io/nvidia/pytorch:24.10-py3",
                "resources": {
                    "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": str(gpus)},
                    "limits": {"memory": "64Gi", "nvidia.com/gpu": str(gpus)},
                },
            }
        ],
        "restartPolicy": "Never",
        "schedulerName": "default-scheduler",
        "serviceAccountName": "default",
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
    }
    status: dict[str, Any]
    if node_name:
        spec["nodeName"] = node_name
        status = {
            "phase": "Running",
            "startTime": started,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": started}
            ],
            "hostIP": "10.0.0.1",
            "podIP": "10.1.0.1",
            "qosClass": "Burstable",
        }
    elif group:  # Kueue gates a group's pods until it admits the whole group
        spec["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
        status = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "SchedulingGated",
                    "lastTransitionTime": started,
                    "message": "Scheduling is blocked due to non-empty scheduling gates",
                }
            ],
            "qosClass": "Burstable",
        }
    else:
        status = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "lastTransitionTime": started,
                    "message": "0/4 nodes are available",
                }
            ],
            "qosClass": "Burstable",
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "resourceVersion": "2000",
            "creationTimestamp": started,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": owners,
            **({"finalizers": ["kueue.x-k8s.io/managed"]} if group else {}),
        },
        "spec": spec,
        "status": status,
    }


def kube_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}


def write(tmp: Path, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[str]:
    """The two files, as ``--nodes FILE --pods FILE`` arguments."""
    (tmp / "nodes.json").write_text(json.dumps(kube_list(nodes)))
    (tmp / "pods.json").write_text(json.dumps(kube_list(pods)))
    return ["--nodes", str(tmp / "nodes.json"), "--pods", str(tmp / "pods.json")]
