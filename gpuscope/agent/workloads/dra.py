"""Which GPU a DRA device is, for the agent's attribution.

The kubelet's pod-resources API reports devices handed out through Dynamic Resource
Allocation per container (``dynamic_resources``: claim name and namespace, then driver,
pool and device name per allocated device) but no GPU UUID. The DRA driver publishes the
UUID as a device attribute in its ResourceSlices (NVIDIA's: ``uuid``; a MIG device also
``parentUUID`` and ``profile``). The agent lists its own node's slices from the API server
(a ``spec.nodeName`` field selector: one small list per agent per TTL) and joins them:

- a device with a ``uuid`` is that GPU or MIG device;
- a MIG placement without one (the driver's dynamic MIG, created on prepare) is matched to
  the MIG reading of its ``parentUUID`` with its ``profile`` (:func:`resolve`).

Slices follow the ResourceSlice rules: a pool's highest ``generation`` only. A failed list
keeps the last good answer and is logged once per streak; a cluster without
``resource.k8s.io/v1`` (404) is logged once and the join is simply empty. The agent imports
no collector code, so this reading of slices is its own (small) one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuscope.core.records import GpuReading

log = logging.getLogger(__name__)

DeviceKey = tuple[str, str, str]  # driver, pool, device


@dataclass(frozen=True, slots=True)
class DeviceIdentity:
    """What a ResourceSlice says a device is."""

    type: str = ""
    uuid: str = ""
    parent_uuid: str = ""
    profile: str = ""


def _string(attrs: Mapping[str, Any], name: str) -> str:
    for key, value in attrs.items():
        if key.rsplit("/", 1)[-1] == name and isinstance(value, Mapping):
            return str(value.get("string") or value.get("version") or "")
    return ""


def identities_from_slices(slices: Iterable[Mapping[str, Any]]) -> dict[DeviceKey, DeviceIdentity]:
    """Device identities of the slices (each pool at its highest generation only)."""
    items = list(slices)
    newest: dict[tuple[str, str], int] = {}
    for obj in items:
        spec = obj.get("spec") or {}
        pool = spec.get("pool") or {}
        key = (str(spec.get("driver", "")), str(pool.get("name", "")))
        newest[key] = max(newest.get(key, 0), int(pool.get("generation") or 0))
    out: dict[DeviceKey, DeviceIdentity] = {}
    for obj in items:
        spec = obj.get("spec") or {}
        pool = spec.get("pool") or {}
        driver, pool_name = str(spec.get("driver", "")), str(pool.get("name", ""))
        if int(pool.get("generation") or 0) != newest[(driver, pool_name)]:
            continue
        for dev in spec.get("devices") or ():
            attrs = dev.get("attributes") or {}
            out[(driver, pool_name, str(dev.get("name", "")))] = DeviceIdentity(
                type=_string(attrs, "type"),
                uuid=_string(attrs, "uuid"),
                parent_uuid=_string(attrs, "parentUUID"),
                profile=_string(attrs, "profile"),
            )
    return out


def resolve(
    identity: DeviceIdentity | None, gpus: Sequence[GpuReading], taken: set[str] | None = None
) -> str:
    """The UUID of the reading this device is: its own ``uuid`` when the node has a reading
    of it (or no readings are given); a MIG placement by ``parentUUID`` and ``profile``
    (the first such MIG reading not ``taken`` by another placement); "" when unknown."""
    if identity is None:
        return ""
    uuids = {g.uuid for g in gpus}
    if identity.uuid and (not gpus or identity.uuid in uuids):
        return identity.uuid
    if identity.parent_uuid:
        candidates = [
            g.uuid
            for g in gpus
            if g.parent_uuid == identity.parent_uuid
            and (not identity.profile or g.mig_profile == identity.profile)
        ]
        free = [u for u in candidates if u not in (taken or set())]
        if free or candidates:
            return (free or candidates)[0]
        return identity.parent_uuid if identity.parent_uuid in uuids else ""
    return identity.uuid


class SliceSource:
    """This node's ResourceSlices from the API server, cached for ``ttl_seconds``.

    ``api`` is anything with ``list_resource_slice`` as the Kubernetes client's
    ``ResourceV1Api`` has it; by default the agent's own in-cluster client
    (:class:`gpuscope.agent.workloads.kubeapi.InClusterApi`) is built on first use. Needs ``list``
    on ``resourceslices.resource.k8s.io`` (the agent's RBAC).
    """

    def __init__(
        self,
        node: str,
        ttl_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        api: Any | None = None,
        *,
        request_timeout_seconds: float = 5.0,
    ) -> None:
        self.node = node
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._api = api
        self._timeout = request_timeout_seconds
        self._identities: dict[DeviceKey, DeviceIdentity] = {}
        self._fetched_at: float | None = None
        self._failing = False
        self._absent = False
        self.last_error = ""

    def identities(self) -> Mapping[DeviceKey, DeviceIdentity]:
        now = self._clock()
        if self._fetched_at is None or now - self._fetched_at >= self.ttl_seconds:
            self._fetched_at = now
            self._refresh()
        return self._identities

    def _refresh(self) -> None:
        try:
            if self._api is None:
                from gpuscope.agent.workloads.kubeapi import InClusterApi

                self._api = InClusterApi()
            resp = self._api.list_resource_slice(
                field_selector=f"spec.nodeName={self.node}",
                _preload_content=False,
                _request_timeout=self._timeout,
            )
            import json

            body = json.loads(resp.data)
        except Exception as exc:  # any failure keeps the last good answer
            status = getattr(exc, "status", None)
            if status == 404:
                if not self._absent:
                    log.info("DRA: resource.k8s.io/v1 not served; no DRA devices to attribute")
                self._absent = True
                return
            reason = " ".join(str(getattr(exc, "reason", "") or exc).split())
            self.last_error = f"{type(exc).__name__}: {reason or type(exc).__name__}"
            if not self._failing:
                log.warning("DRA: ResourceSlice list failed node=%s reason=%r", self.node,
                            self.last_error)  # fmt: skip
            self._failing = True
            return
        if self._failing:
            log.info("DRA: ResourceSlice list recovered node=%s", self.node)
        self._failing = self._absent = False
        self.last_error = ""
        self._identities = identities_from_slices(body.get("items") or ())
