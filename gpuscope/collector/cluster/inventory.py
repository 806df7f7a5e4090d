"""The Kubernetes inventory: nodes, pods and GPU quotas, kept current by list and watch.

:class:`KubeInventory` talks to the API server through the official client. The first
:meth:`~KubeInventory.sync_once` lists nodes and pods; later ones watch from the last seen
resourceVersion for a short while, and list again only when the API server answers 410 Gone
(its history was compacted). Namespaces, ResourceQuotas, Kueue ClusterQueues, LocalQueues
and Cohorts, and KAI Queues are listed on every sync; the queue CRDs are read only where
they are installed (gpuscope.collector.cluster.queue_records reads them). DRA's ResourceSlices,
claims, templates and classes are listed and watched too
(:mod:`gpuscope.collector.cluster.inventory_dra`) and folded into the node and pod records
(:mod:`gpuscope.collector.cluster.dra_apply`).

:func:`node_from_json` and :func:`pod_from_json` (from
:mod:`gpuscope.collector.cluster.inventory_records`,
re-exported here) are pure: the watch feeds them the same objects ``kubectl get -o json``
prints. Client errors become :class:`InventoryError` with one line; 5xx, 429 and connection
errors are retried with backoff first.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from kubernetes import client, watch

from gpuscope.collector.cluster.dra_apply import apply_dra
from gpuscope.collector.cluster.inventory_dra import DraInventory
from gpuscope.collector.cluster.inventory_records import (
    InventorySnapshot,
    NodeInfo,
    PodInfo,
    QuotaInfo,
    node_from_json,
    pod_from_json,
)
from gpuscope.collector.cluster.kube_api import RetryPolicy, call_with_retry
from gpuscope.collector.cluster.kube_config import (
    InventoryError,
    kube_configuration,
    load_configuration,
)
from gpuscope.collector.cluster.pdb_records import Budget, budget_from_json
from gpuscope.collector.cluster.queue_records import (
    namespace_labels,
    quota_from_clusterqueue,
    quota_from_cohort,
    quota_from_kai_queue,
    quota_from_localqueue,
    quota_from_resourceflavor,
    quota_from_resourcequota,
)
from gpuscope.core.collector_settings import WorkloadSettings

log = logging.getLogger(__name__)
T = TypeVar("T")
Obj = dict[str, Any]

__all__ = [
    "InventoryError",
    "InventorySnapshot",
    "KubeInventory",
    "NodeInfo",
    "PodInfo",
    "QuotaInfo",
    "kube_configuration",
    "load_configuration",
    "node_from_json",
    "pod_from_json",
    "quota_from_clusterqueue",
    "quota_from_cohort",
    "quota_from_kai_queue",
    "quota_from_localqueue",
    "quota_from_resourceflavor",
    "quota_from_resourcequota",
]
KUEUE = ("kueue.x-k8s.io", "v1beta1", "clusterqueues")
KUEUE_LOCAL = ("kueue.x-k8s.io", "v1beta1", "localqueues")
KUEUE_COHORTS = ("kueue.x-k8s.io", "v1beta1", "cohorts")
KUEUE_FLAVORS = ("kueue.x-k8s.io", "v1beta1", "resourceflavors")
KAI = ("scheduling.run.ai", "v2", "queues")


# -- the inventory ----------------------------------------------------------------------------
class KubeInventory:
    """Nodes, pods and quotas of one cluster, kept current by list and watch."""

    def __init__(
        self,
        configuration: client.Configuration | str,
        *,
        settings: WorkloadSettings | None = None,
        watch_timeout_seconds: int = 1,
        request_timeout_seconds: float = 30.0,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if isinstance(configuration, str):
            host, configuration = configuration, client.Configuration()
            configuration.host = host.rstrip("/")
        configuration.retries = 0  # retries are ours, with backoff
        self.host: str = configuration.host
        self._api = client.ApiClient(configuration)
        self._core = client.CoreV1Api(self._api)
        self._custom = client.CustomObjectsApi(self._api)
        self._policy = client.PolicyV1Api(self._api)
        self._settings = settings or WorkloadSettings()
        self._watch_timeout = max(1, int(watch_timeout_seconds))
        self._timeout = request_timeout_seconds
        self._retry, self._sleep, self._clock = retry or RetryPolicy(), sleep, clock
        self._lock = threading.Lock()
        self._objects: dict[str, dict[str, Obj]] = {"nodes": {}, "pods": {}}
        self._rv: dict[str, str | None] = {"nodes": None, "pods": None}
        self._quotas: tuple[QuotaInfo, ...] = ()
        #: None until read, and while they cannot be (the stored ones are then left alone).
        self._pdbs: tuple[Budget, ...] | None = None
        self._namespaces: tuple[str, ...] = ()
        self._synced_at: float | None = None
        self._parsed: dict[str, tuple[object, PodInfo]] = {}
        self._dra = DraInventory(
            self._api, self._list_raw, self._call, self._watch_timeout, self._timeout
        )

    @classmethod
    def from_environment(
        cls, *, kubeconfig: str | None = None, context: str | None = None, **kwargs: Any
    ) -> KubeInventory:
        """In-cluster service account when running in a pod, else the kubeconfig."""
        return cls(load_configuration(kubeconfig=kubeconfig, context=context), **kwargs)

    @property
    def api_client(self) -> client.ApiClient:
        """The authenticated client, for other reads of the same API (target discovery)."""
        return self._api

    def close(self) -> None:
        self._api.close()

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        return call_with_retry(what, self.host, fn, self._retry, self._sleep)

    def _list_raw(self, what: str, fn: Callable[..., Any], *args: str) -> Obj:
        def go() -> Obj:
            resp = fn(*args, _preload_content=False, _request_timeout=(5, self._timeout))
            try:
                body: Obj = json.loads(resp.data)
                return body
            finally:
                resp.release_conn()

        return self._call(what, go)

    # -- nodes and pods ------------------------------------------------------------------------
    def _lister(self, resource: str) -> Callable[..., Any]:
        lister: Callable[..., Any] = getattr(
            self._core, "list_node" if resource == "nodes" else "list_pod_for_all_namespaces"
        )
        return lister

    @staticmethod
    def _key(resource: str, obj: Obj) -> str:
        meta = obj.get("metadata", {})
        return str(meta.get("name") if resource == "nodes" else meta.get("uid"))

    def _relist(self, resource: str) -> None:
        body = self._list_raw(f"list {resource}", self._lister(resource))
        objects = {self._key(resource, o): o for o in body.get("items") or ()}
        with self._lock:
            self._objects[resource] = objects
            self._rv[resource] = str(body.get("metadata", {}).get("resourceVersion") or "") or None
        log.debug("listed %d %s at resourceVersion %s", len(objects), resource, self._rv[resource])

    def _watch_round(self, resource: str) -> None:
        def go() -> None:
            w = watch.Watch(return_type="object")
            stream = w.stream(
                self._lister(resource),
                resource_version=self._rv[resource],
                timeout_seconds=self._watch_timeout,
                allow_watch_bookmarks=True,
                _request_timeout=(5, self._watch_timeout + self._timeout),
            )
            for event in stream:
                self._apply(resource, str(event["type"]), event["raw_object"])

        self._call(f"watch {resource}", go)

    def _apply(self, resource: str, kind: str, obj: Obj) -> None:
        with self._lock:
            if kind in ("ADDED", "MODIFIED"):
                self._objects[resource][self._key(resource, obj)] = obj
            elif kind == "DELETED":
                self._objects[resource].pop(self._key(resource, obj), None)
            rv = obj.get("metadata", {}).get("resourceVersion")
            if rv:
                self._rv[resource] = str(rv)

    def _sync_resource(self, resource: str) -> None:
        if self._rv[resource] is None:
            self._relist(resource)
            return
        try:
            self._watch_round(resource)
        except InventoryError as err:
            if err.status != 410:
                raise
            log.info("watch of %s expired (410 Gone); listing again", resource)
            self._relist(resource)

    # -- namespaces and quotas -----------------------------------------------------------------
    def _optional_crd(self, group: str, version: str, plural: str) -> list[Obj]:
        try:
            body = self._list_raw(
                f"list {plural}.{group}",
                self._custom.list_cluster_custom_object,
                group,
                version,
                plural,
            )
        except InventoryError as err:
            if err.status == 404:
                log.debug("%s/%s %s not served; skipped", group, version, plural)
                return []
            raise
        return list(body.get("items") or ())

    def _sync_quotas(self) -> None:
        ns = self._list_raw("list namespaces", self._core.list_namespace)
        rq = self._list_raw(
            "list resourcequotas", self._core.list_resource_quota_for_all_namespaces
        )
        quotas = [q for q in map(quota_from_resourcequota, rq.get("items") or ()) if q]
        with self._lock:  # a pod's namespace is known even before the next namespace list
            pod_namespaces = {
                str((o.get("metadata") or {}).get("namespace") or "")
                for o in self._objects["pods"].values()
            }
        labels = namespace_labels(ns.get("items") or (), pod_namespaces)
        quotas += [quota_from_clusterqueue(o, labels) for o in self._optional_crd(*KUEUE)]
        # a pod's queue-name names a LocalQueue, which names the ClusterQueue that holds
        # the quota; Cohort objects give a cohort its own quota and a parent
        quotas += [quota_from_localqueue(o) for o in self._optional_crd(*KUEUE_LOCAL)]
        quotas += [quota_from_cohort(o) for o in self._optional_crd(*KUEUE_COHORTS)]
        # ResourceFlavors: which nodes (labels, taints) are of which GPU flavor
        quotas += [quota_from_resourceflavor(o) for o in self._optional_crd(*KUEUE_FLAVORS)]
        quotas += [quota_from_kai_queue(o) for o in self._optional_crd(*KAI)]
        with self._lock:
            self._namespaces = tuple(
                sorted(o.get("metadata", {}).get("name", "") for o in ns.get("items") or ())
            )
            self._quotas = tuple(sorted(quotas, key=lambda q: (q.source, q.project, q.namespace)))

    def _sync_pdbs(self) -> None:
        """PodDisruptionBudgets (policy/v1), for plans made from the database. Never fails
        the sync: unreadable (RBAC without the rule, say) they are unknown this round, and
        the ones stored before are left as they were."""
        try:
            body = self._list_raw(
                "list poddisruptionbudgets",
                self._policy.list_pod_disruption_budget_for_all_namespaces,
            )
        except InventoryError as err:
            log.warning("PodDisruptionBudgets not read; plans from the database go without: %s",
                        err)  # fmt: skip
            with self._lock:
                self._pdbs = None
            return
        budgets = sorted(map(budget_from_json, body.get("items") or ()), key=lambda b: b.key)
        with self._lock:
            self._pdbs = tuple(budgets)

    # -- public ---------------------------------------------------------------------------------
    def sync_once(self) -> InventorySnapshot:
        """One list (first time, or after 410 Gone) or one short watch round of nodes and
        pods, side by side, and a list of namespaces and quotas; then the snapshot."""
        with ThreadPoolExecutor(max_workers=3, thread_name_prefix="inventory") as pool:
            # DRA never fails the sync: a cluster without it is told apart and logged there
            dra = pool.submit(self._dra.sync)
            futures = [pool.submit(self._sync_resource, r) for r in ("nodes", "pods")]
            for future in futures:
                future.result()
            dra.result()
        self._sync_quotas()
        self._sync_pdbs()
        with self._lock:
            self._synced_at = self._clock()
        return self.snapshot()

    def snapshot(self) -> InventorySnapshot:
        """The state as of the last sync (empty before the first)."""
        with self._lock:
            raw_nodes = list(self._objects["nodes"].values())
            raw_pods = list(self._objects["pods"].values())
            quotas, namespaces, synced = self._quotas, self._namespaces, self._synced_at
            pdbs = self._pdbs
            rvs = {k: v for k, v in self._rv.items() if v}
        nodes = {n.name: n for n in map(node_from_json, raw_nodes)}
        pods = []
        parsed: dict[str, tuple[object, PodInfo]] = {}
        for obj in raw_pods:
            meta = obj.get("metadata", {})
            node = nodes.get(obj.get("spec", {}).get("nodeName") or "")
            key = (meta.get("resourceVersion"), node and (node.gpu_memory_mib, node.gpu_replicas))
            cached = self._parsed.get(meta.get("uid", ""))
            info = cached[1] if cached and cached[0] == key else None
            if info is None:
                info = pod_from_json(obj, node=node, settings=self._settings)
            parsed[info.uid] = (key, info)
            pods.append(info)
        self._parsed = parsed
        node_list = list(nodes.values())
        if self._dra.objects:  # GPUs handed out through DRA claims count as any other
            applied = apply_dra(node_list, pods, raw_pods, self._dra.objects)
            node_list, pods = list(applied.nodes), list(applied.pods)
        return InventorySnapshot(
            nodes=tuple(sorted(node_list, key=lambda n: n.name)),
            pods=tuple(sorted(pods, key=lambda p: (p.namespace, p.name))),
            quotas=quotas,
            namespaces=namespaces,
            synced_at=synced,
            resource_versions=rvs,
            pdbs=pdbs,
        )
