"""The live inventory's DRA part: ``resource.k8s.io/v1`` ResourceSlices, ResourceClaims,
ResourceClaimTemplates and DeviceClasses, listed on every sync beside the quotas.

A cluster without the API (before Kubernetes 1.34, or with only a beta version served) is
told apart once, in one log line naming the versions it serves, and the rest of the
inventory keeps working: GPUs are then those of the device plugins only. A refused or
failed DRA list (RBAC not granted, a flaky server) is logged once per streak and the last
good DRA state is kept; it never fails the sync of nodes, pods and quotas. Found again
later (the API enabled, the permission granted), it is used from that sync on.

The objects are handed to :func:`gpuscope.collector.dra_apply.apply_dra` by
:class:`~gpuscope.collector.inventory.KubeInventory` when it builds its snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kubernetes import client

from gpuscope.collector.dra_records import GROUP, VERSION, DraObjects, dra_objects
from gpuscope.collector.kube_config import InventoryError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
ListRaw = Callable[..., Obj]
#: Syncs between two looks for the API on a cluster that did not serve it.
RECHECK_EVERY = 60


class DraInventory:
    """DRA objects of one cluster, listed through the inventory's retrying ``list_raw``."""

    def __init__(self, api: client.ApiClient, list_raw: ListRaw) -> None:
        self._resource = client.ResourceV1Api(api)
        self._group = client.ResourceApi(api)
        self._list_raw = list_raw
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

    def sync(self) -> DraObjects:
        """List the four kinds (when served); the last good state on a failure."""
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
            items = {
                plural: list(self._list_raw(f"list {plural}.{GROUP}", fn).get("items") or ())
                for plural, fn in (
                    ("resourceslices", self._resource.list_resource_slice),
                    ("resourceclaims", self._resource.list_resource_claim_for_all_namespaces),
                    (
                        "resourceclaimtemplates",
                        self._resource.list_resource_claim_template_for_all_namespaces,
                    ),
                    ("deviceclasses", self._resource.list_device_class),
                )
            }
        except InventoryError as err:
            if not self._failing:
                log.warning("DRA: listing failed, keeping the last DRA state: %s", err)
            self._failing = True
            if err.status == 404:
                self._served = None
            return self.objects
        if self._failing:
            log.info("DRA: listing works again")
        self._failing = False
        self.objects = dra_objects(
            items["resourceslices"],
            items["resourceclaims"],
            items["resourceclaimtemplates"],
            items["deviceclasses"],
        )
        log.debug("DRA: %d devices, %d claims", len(self.objects.devices), len(self.objects.claims))
        return self.objects
