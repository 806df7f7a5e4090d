"""How a pod is classified: workload kind, project, whether it may be moved or touched.

Pure functions over a pod's labels, annotations, owner and priority, shared by the agent
(to label its workload series) and the collector's inventory (to decide policies), so both
always agree on what a pod is. The order of evidence follows docs/design.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gpuscope.core import kube_names as names
from gpuscope.core.records import WorkloadKind


class WorkloadRule(Protocol):
    """A site rule (``workloads.rules``): pods whose labels match ``match`` are of ``kind``.

    A protocol, so that the full settings model's rules and the agent's own
    (gpuscope.agent.config, no pydantic) both serve, and this module imports neither.
    """

    @property
    def match(self) -> Mapping[str, str]: ...

    @property
    def kind(self) -> str: ...


class WorkloadPolicy(Protocol):
    """The ``workloads`` settings classification reads."""

    @property
    def rules(self) -> Sequence[WorkloadRule]: ...

    @property
    def preemptible_priority_below(self) -> int: ...

    @property
    def protected_namespaces(self) -> Sequence[str]: ...


TYPE_LABEL = "gpuscope.io/workload-type"
PROJECT_LABEL = "gpuscope.io/project"
PREEMPTIBLE_LABEL = "gpuscope.io/preemptible"
PROTECT_LABEL = "gpuscope.io/protect"
#: Queue labels of schedulers people run, in the order they are consulted.
QUEUE_LABELS: tuple[str, ...] = (
    names.KUEUE_QUEUE_LABEL,
    names.KAI_QUEUE_LABEL,
    "runai/queue",
    "project",  # Run:ai's own project label
)

_INTERACTIVE_OWNERS = frozenset({"Notebook"})
_TRAINING_OWNERS = frozenset(
    {"PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob", "TrainJob", "RayJob"}
)
_BATCH_OWNERS = frozenset({"Job", "CronJob", "Workflow"})
_INFERENCE_OWNERS = frozenset({"InferenceService", "Deployment", "ReplicaSet"})


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What the classification needs to know of a pod."""

    namespace: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    owner_kind: str = ""
    priority: int | None = None


@dataclass(frozen=True, slots=True)
class Classification:
    kind: WorkloadKind
    project: str
    preemptible: bool
    protected: bool


def workload_kind(pod: PodFacts, rules: Sequence[WorkloadRule] = ()) -> WorkloadKind:
    """Kind from the explicit label, then the owner, then site rules; else unknown."""
    explicit = pod.labels.get(TYPE_LABEL, "").strip().lower()
    if explicit in {k.value for k in WorkloadKind if k is not WorkloadKind.UNKNOWN}:
        return WorkloadKind(explicit)
    owner = pod.owner_kind
    if owner in _INTERACTIVE_OWNERS or _is_notebook_pod(pod.labels):
        return WorkloadKind.INTERACTIVE
    if owner in _TRAINING_OWNERS:
        return WorkloadKind.TRAINING
    if owner in _BATCH_OWNERS:
        return WorkloadKind.BATCH
    for rule in rules:
        if all(pod.labels.get(k) == v for k, v in rule.match.items()):
            return WorkloadKind(rule.kind)
    if owner in _INFERENCE_OWNERS:
        return WorkloadKind.INFERENCE
    return WorkloadKind.UNKNOWN


def _is_notebook_pod(labels: Mapping[str, str]) -> bool:
    """A Kubeflow notebook's pod (owned by a StatefulSet, labelled ``notebook-name``) or a
    JupyterHub single-user server (``component=singleuser-server``)."""
    return names.NOTEBOOK_LABEL in labels or labels.get("component") == "singleuser-server"


def project_of(pod: PodFacts) -> str:
    """Project from the gpuscope label, then a scheduler queue label, else the namespace."""
    for key in (PROJECT_LABEL, *QUEUE_LABELS):
        value = pod.labels.get(key, "").strip()
        if value:
            return value
    return pod.namespace


def classify(
    pod: PodFacts,
    *,
    rules: Sequence[WorkloadRule] = (),
    preemptible_priority_below: int = 0,
    protected_namespaces: Sequence[str] = (),
) -> Classification:
    """Kind, project, preemptibility and protection of one pod."""
    preemptible = pod.labels.get(PREEMPTIBLE_LABEL, "").lower() == "true" or (
        pod.priority is not None and pod.priority < preemptible_priority_below
    )
    protected = (
        pod.labels.get(PROTECT_LABEL, "").lower() == "true"
        or pod.annotations.get(PROTECT_LABEL, "").lower() == "true"
        or pod.namespace in protected_namespaces
    )
    return Classification(
        kind=workload_kind(pod, rules),
        project=project_of(pod),
        preemptible=preemptible,
        protected=protected,
    )
