"""The live inventory's DRA part: ``resource.k8s.io/v1`` ResourceSlices, ResourceClaims,
ResourceClaimTemplates and DeviceClasses, listed on the first sync and watched after it
(a short watch round per kind on each sync, as the nodes and pods are).

A cluster without the API (before Kubernetes 1.34, or with only a beta version served) is
told apart once, in one log line naming the versions it serves, and the rest of the
inventory keeps working: GPUs are then those of the device plugins only. A refused or
failed DRA list (RBAC not granted, a flaky server) is logged once per streak and the last
good DRA state is kept; it never fails the sync of nodes, pods and quotas. Found again
later (the API enabled, the permission granted), it is used from that sync on.

The objects are handed to :func:`gpuscope.collector.cluster.dra_apply.apply_dra` by
:class:`~gpuscope.collector.cluster.inventory.KubeInventory` when it builds its snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client, watch

from gpuscope.collector.cluster.dra_records import GROUP, VERSION, DraObjects, dra_objects
from gpuscope.collector.cluster.kube_config import InventoryError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
ListRaw = Callable[..., Obj]
#: Syncs between two looks for the API on a cluster that did not serve it.
RECHECK_EVERY = 60


class DraInventory:
    """DRA objects of one cluster: listed on the first sync (and after 410 Gone), then
    kept current by a short watch round per kind on each later sync, side by side; the
    calls go through the inventory's retrying ``list_raw`` and ``call``."""

    def __init__(
        self,
        api: client.ApiClient,
        list_raw: ListRaw,
        call: Callable[[str, Callable[[], Any]], Any] | None = None,
        watch_timeout_seconds: int = 1,
        request_timeout_seconds: float = 30.0,
    ) -> None:
        self._resource = client.ResourceV1Api(api)
        self._group = client.ResourceApi(api)
        self._list_raw = list_raw
        self._call = call
        self._watch_timeout = max(1, int(watch_timeout_seconds))
        self._timeout = request_timeout_seconds
        self._listers: dict[str, Callable[..., Any]] = {
            "resourceslices": self._resource.list_resource_slice,
            "resourceclaims": self._resource.list_resource_claim_for_all_namespaces,
            "resourceclaimtemplates": (
                self._resource.list_resource_claim_template_for_all_namespaces
            ),
            "deviceclasses": self._resource.list_device_class,
        }
        self._items: dict[str, dict[tuple[str, str], Obj]] = {k: {} for k in self._listers}
        self._rv: dict[str, str | None] = dict.fromkeys(self._listers)
        #: None: not looked yet; False: not served (looked again every RECHECK_EVERY syncs).
        self._served: bool | None = None
        self._since_check = 0
        self._failing = False
        self.objects = DraObjects()

    def _discover(self) -> bool:
        """Whether resource.k8s.io/v1 is served; one log line when it is not."""
        try:
            group = self._list_raw(f"get {GROUP}", self._group.get_api_group)
        except InventoryError as err:
            if err.status != 404:
                raise
            log.info(
                "DRA: %s is not served by this cluster; GPUs are counted from device plugins only",
                GROUP,
            )
            return False
        versions = [str(v.get("version", "")) for v in group.get("versions") or ()]
        if VERSION in versions:
            log.info("DRA: %s/%s served; ResourceSlices and claims are counted", GROUP, VERSION)
            return True
        log.info(
            "DRA: %s serves only %s, not %s; DRA devices are not counted (GPUs from device "
            "plugins only)",
            GROUP,
            ", ".join(versions) or "no version",
            VERSION,
        )
        return False

    @staticmethod
    def _key(obj: Obj) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    def _relist(self, plural: str) -> None:
        body = self._list_raw(f"list {plural}.{GROUP}", self._listers[plural])
        self._items[plural] = {self._key(o): o for o in body.get("items") or ()}
        self._rv[plural] = str((body.get("metadata") or {}).get("resourceVersion") or "") or None

    def _watch_round(self, plural: str) -> None:
        if self._call is None or self._rv[plural] is None:
            self._relist(plural)
            return

        def go() -> None:
            w = watch.Watch(return_type="object")
            stream = w.stream(
                self._listers[plural],
                resource_version=self._rv[plural],
                timeout_seconds=self._watch_timeout,
                allow_watch_bookmarks=True,
                _request_timeout=(5, self._watch_timeout + self._timeout),
            )
            for event in stream:
                obj, kind = event["raw_object"], str(event["type"])
                if kind in ("ADDED", "MODIFIED"):
                    self._items[plural][self._key(obj)] = obj
                elif kind == "DELETED":
                    self._items[plural].pop(self._key(obj), None)
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if rv:
                    self._rv[plural] = str(rv)

        try:
            self._call(f"watch {plural}.{GROUP}", go)
        except InventoryError as err:
            if err.status != 410:
                raise
            log.info("DRA: watch of %s expired (410 Gone); listing again", plural)
            self._relist(plural)

    def sync(self) -> DraObjects:
        """List (first time) or watch the four kinds, when served; on a failure the last
        good state is kept and the next sync lists again."""
        try:
            if self._served is False:
                self._since_check += 1
                if self._since_check < RECHECK_EVERY:
                    return self.objects
            if not self._served:
                self._since_check = 0
                self._served = self._discover()
                if not self._served:
                    return self.objects
            with ThreadPoolExecutor(max_workers=4, thread_name_prefix="inventory-dra") as pool:
                for future in [pool.submit(self._watch_round, p) for p in self._listers]:
                    future.result()
        except Exception as err:  # DRA must never fail the inventory's sync
            if not self._failing:
                why = str(err) if isinstance(err, InventoryError) else repr(err)
                log.warning("DRA: listing failed, keeping the last DRA state: %s", why)
            self._failing = True
            self._rv = dict.fromkeys(self._listers)  # list afresh next time
            if isinstance(err, InventoryError) and err.status == 404:
                self._served = None
            return self.objects
        if self._failing:
            log.info("DRA: listing works again")
        self._failing = False
        self.objects = dra_objects(
            self._items["resourceslices"].values(),
            self._items["resourceclaims"].values(),
            self._items["resourceclaimtemplates"].values(),
            self._items["deviceclasses"].values(),
        )
        log.debug("DRA: %d devices, %d claims", len(self.objects.devices), len(self.objects.claims))
        return self.objects
