"""Kubernetes objects for queue tests, field for field as the API server serves them:
Kueue v1beta1 ClusterQueues, LocalQueues, Cohorts and ResourceFlavors
(kubernetes-sigs/kueue apis/kueue/v1beta1), KAI ``scheduling.run.ai/v2`` Queues, core
Nodes and Pods. Test helpers only: no product code."""

from __future__ import annotations

from typing import Any

KUEUE = "kueue.x-k8s.io/v1beta1"
GPU = "nvidia.com/gpu"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
T0 = "2026-11-23T08:00:00Z"
#: ``namespaceSelector`` left out of a ClusterQueue (Kueue: selects no namespace).
UNSET = object()


def rfc3339(minute: int) -> str:
    return f"2026-11-23T{8 + minute // 60:02d}:{minute % 60:02d}:00Z"


def kubectl_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
            "items": items}  # fmt: skip


def resource_flavor(name: str = "default-flavor") -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {}}  # fmt: skip


def cluster_queue(
    name: str,
    nominal: int,
    cohort: str | None = None,
    *,
    preemption: dict[str, Any] | None = None,
    borrowing_limit: int | None = None,
    lending_limit: int | None = None,
    flavor: str = "default-flavor",
    namespace_selector: Any = None,
    gpu_resource: bool = True,
) -> dict[str, Any]:
    """``namespace_selector`` None: ``{}`` (every namespace); :data:`UNSET` leaves it out;
    ``gpu_resource`` False: the resource group covers cpu and memory only."""
    gpu: dict[str, Any] = {"name": GPU, "nominalQuota": nominal}
    if borrowing_limit is not None:
        gpu["borrowingLimit"] = borrowing_limit
    if lending_limit is not None:
        gpu["lendingLimit"] = lending_limit
    spec: dict[str, Any] = {
        "namespaceSelector": {} if namespace_selector is None else namespace_selector,
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [{
            "coveredResources": ["cpu", "memory", GPU],
            "flavors": [{"name": flavor, "resources": [
                {"name": "cpu", "nominalQuota": 256},
                {"name": "memory", "nominalQuota": "1Ti"},
                gpu,
            ]}],
        }],
        "flavorFungibility": {"whenCanBorrow": "Borrow", "whenCanPreempt": "TryNextFlavor"},
        "stopPolicy": "None",
    }  # fmt: skip
    if namespace_selector is UNSET:
        del spec["namespaceSelector"]
    if not gpu_resource:
        group = spec["resourceGroups"][0]
        group["coveredResources"] = ["cpu", "memory"]
        group["flavors"][0]["resources"] = group["flavors"][0]["resources"][:2]
    if cohort:
        spec["cohort"] = cohort
    if preemption is not None:
        spec["preemption"] = preemption
    return {"apiVersion": KUEUE, "kind": "ClusterQueue",
            "metadata": {"name": name, "uid": f"uid-cq-{name}"}, "spec": spec}  # fmt: skip


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": f"uid-ns-{name}",
                         "labels": {"kubernetes.io/metadata.name": name, **(labels or {})}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}  # fmt: skip


def local_queue(
    namespace: str, cluster_queue_name: str, name: str = "user-queue"
) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-lq-{namespace}"},
            "spec": {"clusterQueue": cluster_queue_name}}  # fmt: skip


def node(name: str, gpus: int = 8, model: str = "NVIDIA-H100-80GB-HBM3") -> dict[str, Any]:
    alloc = {"cpu": "128", "memory": "1Ti", GPU: str(gpus), "pods": "110"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-node-{name}",
                     "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": model,
                                "nvidia.com/gpu.count": str(gpus)}},
        "spec": {},
        "status": {"allocatable": alloc, "capacity": alloc,
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip


def pod(
    namespace: str,
    name: str,
    gpus: int,
    node_name: str | None,
    *,
    job: str | None = None,
    minute: int = 0,
    priority: int = 0,
    queue: str | None = "user-queue",
    started: int | None = None,
) -> dict[str, Any]:
    """A Job's pod (``job``) or a bare pod; bound to ``node_name`` and Running, or Pending
    and Unschedulable; created ``minute`` minutes after T0 and started then (or at
    ``started``)."""
    labels = {QUEUE_LABEL: queue} if queue else {}
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                            "labels": labels, "creationTimestamp": rfc3339(minute)}  # fmt: skip
    if job:
        labels["batch.kubernetes.io/job-name"] = job
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                    "uid": f"uid-job-{job}", "controller": True,
                                    "blockOwnerDeletion": True}]  # fmt: skip
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "trainer:1",
                        "resources": {"limits": {GPU: str(gpus)},
                                      "requests": {GPU: str(gpus), "cpu": "4"}}}],
        "priority": priority, "schedulerName": "default-scheduler",
    }  # fmt: skip
    if node_name:
        spec["nodeName"] = node_name
        begun = rfc3339(minute if started is None else started)
        status: dict[str, Any] = {"phase": "Running", "startTime": begun,
                                  "conditions": [{"type": "PodScheduled", "status": "True"}]}  # fmt: skip
    else:
        status = {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def documented_setup(preemption: dict[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Issue 21's "What was seen": Kueue's documented naming. ClusterQueues team-a and
    team-b (8 GPUs nominal each) in cohort team-ab, a LocalQueue ``user-queue`` in each
    team's namespace, and research (8 GPUs, unused) in another cohort. team-a runs 12 GPUs
    (borrowing 4), team-b 2, and team-b's 4-GPU job waits: within team-b's nominal quota,
    but its cohort has 16 nominal and 14 in use. Four 8-GPU nodes: 18 GPUs are free."""
    return {
        "nodes": [node(f"gpu-{i}") for i in range(1, 5)],
        "pods": [
            pod("team-a", "train-big-0", 8, "gpu-1", job="train-big", minute=0),
            pod("team-a", "train-small-0", 4, "gpu-2", job="train-small", minute=10),
            pod("team-b", "eval-0", 2, "gpu-3", job="eval", minute=20),
            pod("team-b", "finetune-0", 4, None, job="finetune", minute=30),
        ],
        "objects": [
            resource_flavor(),
            cluster_queue("team-a", 8, "team-ab", preemption=preemption),
            cluster_queue("team-b", 8, "team-ab", preemption=preemption),
            cluster_queue("research", 8, "research", preemption=preemption),
            local_queue("team-a", "team-a"),
            local_queue("team-b", "team-b"),
        ],
    }
