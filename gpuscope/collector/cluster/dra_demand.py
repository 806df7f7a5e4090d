"""What a pending pod asks for through DRA: its claim templates' requests (and any
unallocated standalone claim's), read as the allocation model counts demand.

Each request (``exactly``, or the first ``firstAvailable`` subrequest) asks for ``count``
devices of its DeviceClass; whether they are GPUs or MIG devices, the MIG ``profile`` and
the GPU model come from the class's and the request's CEL selectors
(:mod:`gpuscope.collector.cluster.dra_cel`), else from the class name (NVIDIA's ``gpu.nvidia.com``
and ``mig.nvidia.com``) or the devices the selectors match; a ``capacity.requests`` of
``memory``/``shares`` is a share of one GPU, against the largest matching device. What
cannot be read (a selector not understood, ``allocationMode: All``, a template not found)
is handed to ``note``, never silently dropped. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from gpuscope.collector.cluster.dra_cel import evaluate, not_understood, wanted_attributes
from gpuscope.collector.cluster.dra_records import DeviceRequest, DraClaim, DraObjects
from gpuscope.collector.cluster.inventory_records import PodInfo

#: Which kind of device a DeviceClass hands out, where its selectors do not say.
CLASS_TYPES = {"gpu.nvidia.com": "gpu", "mig.nvidia.com": "mig"}


def gfd_model(product: str) -> str:
    """``NVIDIA A100-SXM4-80GB`` -> ``NVIDIA-A100-SXM4-80GB``, as GPU feature discovery
    writes ``nvidia.com/gpu.product``."""
    return "-".join(product.split())


def pod_claim_refs(obj: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(entry name, claim name or "", template name or "")`` of ``spec.resourceClaims``,
    the generated claim names from ``status.resourceClaimStatuses``."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    generated = {
        s.get("name", ""): s.get("resourceClaimName") or ""
        for s in status.get("resourceClaimStatuses") or ()
    }
    out = []
    for entry in spec.get("resourceClaims") or ():
        name = str(entry.get("name", ""))
        if entry.get("resourceClaimName"):
            out.append((name, str(entry["resourceClaimName"]), ""))
        elif entry.get("resourceClaimTemplateName"):
            out.append((name, generated.get(name, ""), str(entry["resourceClaimTemplateName"])))
    return out


def request_demand(
    dra: DraObjects, request: DeviceRequest, where: str, note: Callable[[str], None]
) -> tuple[str, int, float, str, str]:
    """``(type, count, share, profile, model)`` a request of a pending pod asks for."""
    cls = dra.classes.get(request.device_class)
    selectors = (*(cls.selectors if cls else ()), *request.selectors)
    wanted = wanted_attributes(selectors)
    kind = wanted.get("type") or CLASS_TYPES.get(request.device_class, "")
    matching = [d for d in dra.devices if (d.is_gpu or d.is_mig) and evaluate(selectors, d).matches]
    if not kind and matching:
        kind = "mig" if all(d.is_mig for d in matching) else "gpu"
    for clause in not_understood(selectors):
        note(f"{where}: selector not understood, taken as true: {clause}")
    count = request.count
    if request.mode == "All":
        note(f"{where}: allocationMode All counted as {count} device(s)")
    share = 1.0
    if request.capacity:
        caps = [
            (amount, max((d.capacity.get(name, 0.0) for d in matching), default=0.0))
            for name, amount in request.capacity.items()
        ]
        ratios = [a / c for a, c in caps if c > 0]
        share = min(1.0, max(ratios)) if ratios else 1.0
    return (
        kind,
        count,
        share,
        wanted.get("profile", ""),
        gfd_model(wanted.get("productName", "")),
    )


def pending_demand(
    dra: DraObjects,
    claims: Mapping[tuple[str, str], DraClaim],
    pod: PodInfo,
    obj: Mapping[str, Any],
    note: Callable[[str], None],
) -> PodInfo:
    """A pending pod with its DRA demand (module docstring); what cannot be read goes to
    ``note``."""
    key = f"{pod.namespace}/{pod.name}"
    requests: list[DeviceRequest] = []
    for entry, claim_name, template in pod_claim_refs(obj):
        if template:
            found = dra.templates.get((pod.namespace, template))
            if found is None:
                note(f"pod {key}: ResourceClaimTemplate {template} not found")
            requests += found or ()
        else:
            claim = claims.get((pod.namespace, claim_name))
            if claim is None:
                note(f"pod {key}: ResourceClaim {claim_name} (claim {entry}) not found")
            elif not claim.allocated:
                requests += claim.requests
    if not requests:
        return pod
    whole, share_count, share, mig, model = 0, 0, 0.0, dict(pod.mig), ""
    for request in requests:
        where = f"pod {key} request {request.name}"
        kind, count, s, profile, wanted_model = request_demand(dra, request, where, note)
        model = model or wanted_model
        if kind == "mig":
            if not profile:
                note(f"{where}: MIG request without a profile, not counted")
                continue
            mig[profile] = mig.get(profile, 0) + count
        elif kind == "gpu":
            if s >= 1.0 - 1e-9:
                whole += count
            else:
                share, share_count = max(share, s), share_count + count
        else:
            note(f"{where}: class {request.device_class} hands out no GPU gpuscope knows")
    changes: dict[str, Any] = {"gpu_request": pod.gpu_request + whole, "mig": mig}
    if share_count and pod.gpu_fraction is None:
        changes["gpu_fraction"] = share
        changes["fraction_devices"] = share_count
    if model and not pod.gpu_spec:
        changes["gpu_spec"] = model
    return replace(pod, **changes)
