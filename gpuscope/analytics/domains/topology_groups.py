"""Pod groups: the multi-pod jobs a topology must hold, recognised the ways the schedulers
define them.

In order of precedence for a pod (the first that applies names its group):

1. a Kueue pod group: label ``kueue.x-k8s.io/pod-group-name``, size from the annotation
   ``kueue.x-k8s.io/pod-group-total-count`` (else the pods seen);
2. a Volcano PodGroup: annotation ``scheduling.k8s.io/group-name``; the PodGroup object
   (``scheduling.volcano.sh``) gives ``spec.minMember`` and, with
   ``spec.networkTopology.mode: hard``, the required tier ``highestTierAllowed``;
3. a KAI-Scheduler PodGroup: annotation (or label) ``pod-group-name``; the PodGroup
   object (``scheduling.run.ai``) gives ``spec.minMember`` and
   ``spec.topologyConstraint.requiredTopologyLevel`` / ``preferredTopologyLevel``;
4. a JobSet: label ``jobset.sigs.k8s.io/jobset-name``;
5. a Kubeflow training job (PyTorchJob...): label ``training.kubeflow.org/job-name``;
6. one Job's pods (controller owner of kind ``Job``).

Kueue Workloads that are not admitted yet (no ``status.admission``, not finished) are pending
groups too, even with no pod created (Kueue keeps a queued Job suspended): one group per
PodSet with ``count`` pods of its template's GPU request.

A pod's topology request comes from its annotations (set on the PodTemplate):
``kueue.x-k8s.io/podset-required-topology`` / ``podset-preferred-topology``, KAI's
``kai.scheduler/topology-required-placement`` / ``-preferred-placement``. Only groups of at
least two pods that ask for whole GPUs are kept: the multi-node jobs topology is about.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuscope.analytics.domains.topology_levels import VOLCANO_TIER_PREFIX
from gpuscope.collector.cluster.inventory_records import PodInfo
from gpuscope.collector.cluster.scheduling_rules import toleration
from gpuscope.core.kube_objects import ObjectSet

KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
KAI_REQUIRED = "kai.scheduler/topology-required-placement"
KAI_PREFERRED = "kai.scheduler/topology-preferred-placement"
VOLCANO_GROUP = "scheduling.k8s.io/group-name"
KAI_GROUP = "pod-group-name"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
KUBEFLOW_LABEL = "training.kubeflow.org/job-name"
GPU = "nvidia.com/gpu"
_ACTIVE = frozenset({"Pending", "Running", "Unknown"})


@dataclass(frozen=True, slots=True)
class PodGroup:
    """A multi-pod job: ``pods`` pods of ``gpus_per_pod`` whole GPUs each, ``placed`` of
    them on nodes; the level it must (``required_level``) or would like to
    (``preferred_level``) stay inside, as a level key ("" for none)."""

    namespace: str
    name: str
    source: str
    pods: int
    gpus_per_pod: int
    placed: int = 0
    required_level: str = ""
    preferred_level: str = ""
    tolerations: frozenset[str] = frozenset()
    members: tuple[str, ...] = field(default_factory=tuple)

    @property
    def key(self) -> str:
        return f"{self.source}:{self.namespace}/{self.name}"

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod

    @property
    def pending(self) -> bool:
        """Waiting as a whole: no pod of it placed yet (a gang starts all at once)."""
        return self.placed == 0


def _group_of(pod: PodInfo) -> tuple[str, str] | None:
    if pod.labels.get(KUEUE_GROUP_LABEL):
        return "kueue-pod-group", pod.labels[KUEUE_GROUP_LABEL]
    if pod.annotations.get(VOLCANO_GROUP):
        return "volcano-podgroup", pod.annotations[VOLCANO_GROUP]
    kai = pod.annotations.get(KAI_GROUP) or pod.labels.get(KAI_GROUP)
    if kai:
        return "kai-podgroup", kai
    if pod.labels.get(JOBSET_LABEL):
        return "jobset", pod.labels[JOBSET_LABEL]
    if pod.labels.get(KUBEFLOW_LABEL):
        return "kubeflow", pod.labels[KUBEFLOW_LABEL]
    if pod.owner_kind == "Job" and pod.owner_name:
        return "job", pod.owner_name
    return None


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _podgroup_specs(objects: ObjectSet) -> dict[tuple[str, str, str], Mapping[str, Any]]:
    out: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for source, group in (("volcano-podgroup", "scheduling.volcano.sh"),
                          ("kai-podgroup", "scheduling.run.ai")):  # fmt: skip
        for obj in objects.of("PodGroup", group=group):
            meta = obj.get("metadata") or {}
            key = (source, str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
            out[key] = obj.get("spec") or {}
    return out


def _levels_from_spec(source: str, spec: Mapping[str, Any]) -> tuple[str, str]:
    if source == "volcano-podgroup":
        nt = spec.get("networkTopology") or {}
        tier = _int(nt.get("highestTierAllowed"))
        if tier is None:
            return "", ""
        key = f"{VOLCANO_TIER_PREFIX}{tier}"
        return (key, "") if nt.get("mode", "hard") == "hard" else ("", key)
    tc = spec.get("topologyConstraint") or {}
    return str(tc.get("requiredTopologyLevel") or ""), str(tc.get("preferredTopologyLevel") or "")


def pod_groups(pods: Iterable[PodInfo], objects: ObjectSet | None = None) -> list[PodGroup]:
    """The multi-pod GPU jobs among the pods and the Kueue Workloads (module docstring)."""
    objects = objects or ObjectSet()
    specs = _podgroup_specs(objects)
    found: dict[tuple[str, str, str], list[PodInfo]] = {}
    for pod in pods:
        if pod.phase not in _ACTIVE or pod.terminating or pod.gpu_request < 1:
            continue
        g = _group_of(pod)
        if g is not None:
            found.setdefault((g[0], pod.namespace, g[1]), []).append(pod)
    out: list[PodGroup] = []
    for (source, ns, name), members in sorted(found.items()):
        first = members[0]
        size = len(members)
        if source == "kueue-pod-group":
            size = max(size, _int(first.annotations.get(KUEUE_GROUP_COUNT)) or 0)
        required = first.annotations.get(KUEUE_REQUIRED) or first.annotations.get(KAI_REQUIRED, "")
        preferred = first.annotations.get(KUEUE_PREFERRED) or first.annotations.get(
            KAI_PREFERRED, ""
        )
        spec = specs.get((source, ns, name))
        if spec is not None:
            size = max(size, _int(spec.get("minMember")) or 0)
            req, pref = _levels_from_spec(source, spec)
            required, preferred = required or req, preferred or pref
        if size < 2:
            continue
        out.append(
            PodGroup(
                namespace=ns,
                name=name,
                source=source,
                pods=size,
                gpus_per_pod=max(p.gpu_request for p in members),
                placed=sum(1 for p in members if p.node),
                required_level=required,
                preferred_level=preferred,
                tolerations=frozenset(first.tolerations),
                members=tuple(sorted(p.name for p in members)),
            )
        )
    # a plain-pod group's Workload is the group itself (its pods exist, gated): counted once
    seen = {(g.namespace, g.name) for g in out}
    out += [
        g
        for g in workload_groups(objects.of("Workload", group="kueue.x-k8s.io"))
        if (g.namespace, g.name.rsplit("/", 1)[0]) not in seen
    ]
    return out


def _template_gpus(template: Mapping[str, Any]) -> int:
    spec = template.get("spec") or {}
    total = 0
    for c in spec.get("containers") or ():
        res = c.get("resources") or {}
        value = (res.get("requests") or {}).get(GPU) or (res.get("limits") or {}).get(GPU)
        total += _int(value) or 0
    return total


def _finished(wl: Mapping[str, Any]) -> bool:
    status = wl.get("status") or {}
    if status.get("admission"):
        return True
    return any(
        c.get("type") == "Finished" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


def workload_groups(workloads: Sequence[Mapping[str, Any]]) -> list[PodGroup]:
    """Kueue Workloads not admitted yet, one group per multi-pod GPU PodSet."""
    out = []
    for wl in workloads:
        meta = wl.get("metadata") or {}
        owners = {str(o.get("kind") or "") for o in meta.get("ownerReferences") or ()}
        if _finished(wl) or "Pod" in owners:  # a plain-pod group: its pods say it
            continue
        for ps in (wl.get("spec") or {}).get("podSets") or ():
            count = _int(ps.get("count")) or 0
            template = ps.get("template") or {}
            gpus = _template_gpus(template)
            if count < 2 or gpus < 1:
                continue
            ann = (template.get("metadata") or {}).get("annotations") or {}
            req = ps.get("topologyRequest") or {}
            tolerations = frozenset(
                t
                for t in map(toleration, (template.get("spec") or {}).get("tolerations") or ())
                if t is not None
            )
            out.append(
                PodGroup(
                    namespace=str(meta.get("namespace") or "default"),
                    name=f"{meta.get('name', '')}/{ps.get('name', 'main')}",
                    source="kueue-workload",
                    pods=count,
                    gpus_per_pod=gpus,
                    required_level=str(req.get("required") or ann.get(KUEUE_REQUIRED) or ""),
                    preferred_level=str(req.get("preferred") or ann.get(KUEUE_PREFERRED) or ""),
                    tolerations=tolerations,
                )
            )
    return out
