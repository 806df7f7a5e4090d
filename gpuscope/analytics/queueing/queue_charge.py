"""Which quota holder a pod is charged to: the first half of the queue model
(gpuscope/analytics/queueing/queues.py; docs/analytics.md, Queues, "Charging a pod")."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KAI_LABEL = "kai.scheduler/queue"


def field_of(rec: Any, key: str, default: Any = None) -> Any:
    value = rec.get(key, default) if isinstance(rec, Mapping) else getattr(rec, key, default)
    return default if value is None else value


def pod_gpus(pod: Any) -> float:
    fraction = field_of(pod, "gpu_fraction", 0.0) or 0.0
    return float(field_of(pod, "gpu_request", 0) or 0) + float(fraction) * float(
        field_of(pod, "fraction_devices", 1) or 1
    )


class Charger:
    """Which quota holder a pod is charged to, from the quota and queue records."""

    def __init__(self, quotas: Iterable[Any]) -> None:
        self.quotas = list(quotas)
        self.cqs, self.kai = self._by("kueue"), self._by("kai")
        self.config, self.cohorts = self._by("config"), self._by("kueue-cohort")
        self.flavors = self._by("kueue-flavor")
        self.local = {
            (field_of(q, "namespace", ""), field_of(q, "project", "")): field_of(
                q, "cluster_queue", ""
            )
            for q in self.quotas
            if field_of(q, "source") == "kueue-localqueue"
        }
        self.rq: dict[str, float] = {}
        for q in self.quotas:
            if field_of(q, "source") == "resourcequota":
                ns = field_of(q, "namespace", "")
                self.rq[ns] = self.rq.get(ns, 0.0) + float(field_of(q, "guaranteed_gpus", 0.0))

    def _by(self, source: str) -> dict[str, Any]:
        return {
            field_of(q, "project", ""): q for q in self.quotas if field_of(q, "source") == source
        }

    def charge(self, pod: Any) -> tuple[str, str, str]:
        """(project, scheduler, local queue) of a pod."""
        labels = field_of(pod, "labels", {}) or {}
        ns = str(field_of(pod, "namespace", ""))
        lq = labels.get(KUEUE_LABEL)
        if lq and self.local:
            # Kueue does not admit a job whose LocalQueue or ClusterQueue does not exist
            cq = self.local.get((ns, lq))
            if cq is None:
                return f"{ns}/{lq}", "inadmissible", lq
            return (cq, "kueue" if cq in self.cqs else "inadmissible", lq)
        project = str(field_of(pod, "project", "") or ns)
        kai = labels.get(KAI_LABEL)
        if kai and kai in self.kai:
            return kai, "kai", ""
        if not self.local:  # no LocalQueue known: a name equal to a ClusterQueue's is it
            for name in (lq, project):
                if name and name in self.cqs:
                    return str(name), "kueue", ""
        if project in self.kai:
            return project, "kai", ""
        if ns in self.rq and (project == ns or project not in self.config):
            return ns, "resourcequota", ""
        if project in self.config:
            return project, "config", ""
        return project, "unmanaged", ""
