"""The simulated cluster's pods as Kubernetes objects: ``kubectl get pods -A -o json``.

The pods follow the owner chains of the real controllers (gpuscope/sim/kube.py's docstring
says which), with their labels, requests and status; the nodes, namespaces and Kueue
ClusterQueues are in gpuscope/sim/kube.py.
"""

from __future__ import annotations

from typing import Any

from gpuscope.core.kube_names import (
    FRACTION_ANNOTATION,
    GPU_RESOURCE,
    KAI_QUEUE_LABEL,
    KUEUE_QUEUE_LABEL,
    MIG_RESOURCE_PREFIX,
    NOTEBOOK_LABEL,
)
from gpuscope.sim.cluster import SimPod, SimulatedCluster
from gpuscope.sim.dra import is_dra_pod, pod_claims
from gpuscope.sim.kube_values import as_list, hex64, quantity, rfc3339, uid
from gpuscope.sim.scenario import WorkloadSpec

__all__ = ["pod_json", "pods_json"]


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
                    "imageID": f"{image.split(':')[0]}@sha256:{hex64(image)}",
                    "containerID": f"containerd://{hex64(f'{pod.uid}/{pod.container}')}",
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
                "uid": uid(f"{cluster.seed}/{w.namespace}/{owner_kind}/{owner}"),
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
    return as_list([pod_json(cluster, p, origin=origin, t=t) for p in listed])
