"""What kube-apiserver checks and does on the writes the actuator sends, for the fake server.

Kept apart from storage (kube_store.py) and HTTP (kube_api.py), each rule as the real
server answers it:

- a patch that carries ``metadata.resourceVersion`` is applied only to that version (409
  ``Conflict``, the optimistic-lock message, otherwise); ``metadata.uid`` cannot change
  (422 ``Invalid``, "field is immutable"), so a patch naming the UID it read never lands on
  an object re-created under the same name;
- a pod's tolerations may only be added to (422, "existing toleration can not be modified
  except its tolerationSeconds"); a node's taints must be unique by key and effect;
- DELETE of a pod bound to a node is graceful: ``deletionTimestamp`` is set and the pod
  lingers, Terminating, until its kubelet confirms (``KubeStore.finish_terminating``);
  ``gracePeriodSeconds: 0`` or an unbound pod goes at once; preconditions (UID,
  resourceVersion) answer 409 with the storage layer's message;
- an eviction (policy/v1) of a pending, finished or Terminating pod is a plain delete;
  otherwise the pod's PodDisruptionBudget must allow a disruption, decided as kube-apiserver's
  eviction handler does (pkg/registry/core/pod/storage/eviction.go), from the budget's status
  (``disruptionsAllowed``, kept here as the disruption controller would, :func:`pdb_status`,
  pkg/controller/disruption/disruption.go): 500 when two budgets select the pod; a pod that
  is not Ready goes without spending the budget under ``unhealthyPodEvictionPolicy:
  AlwaysAllow``, or under ``IfHealthyBudget`` (the default) while ``currentHealthy >=
  desiredHealthy > 0``; else 429 with the ``DisruptionBudget`` cause when the status lags
  its generation or allows none (403 when negative). In policy/v1 an empty selector
  (``{}``) selects every pod of the namespace and an absent one none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tests.fakes.kube_faults import conflict, disruption_budget_refusal, invalid
from tests.fakes.kube_store import ApiError, KubeStore, Obj, Resource, object_selector_matches

DEFAULT_GRACE_SECONDS = 30


def _labels(obj: Obj) -> Mapping[str, str]:
    labels: Mapping[str, str] = obj.get("metadata", {}).get("labels") or {}
    return labels


def check_patch(res: Resource, old: Obj, patch: Obj) -> None:
    """Refuse a patch as the API server would (module docstring)."""
    meta = patch.get("metadata") or {}
    name = old["metadata"]["name"]
    rv = meta.get("resourceVersion")
    if rv is not None and str(rv) != old["metadata"].get("resourceVersion"):
        raise conflict(res.plural, name)
    uid = meta.get("uid")
    if uid is not None and uid != old["metadata"].get("uid"):
        raise invalid(
            res.kind, name, "metadata.uid", "FieldValueInvalid",
            f'Invalid value: "{uid}": field is immutable',
        )  # fmt: skip
    spec = patch.get("spec") or {}
    if res.plural == "pods" and "tolerations" in spec:
        _only_added(name, (old.get("spec") or {}).get("tolerations") or [], spec["tolerations"])
    if res.plural == "nodes" and spec.get("taints"):
        seen: set[tuple[str, str]] = set()
        for i, taint in enumerate(spec["taints"]):
            pair = (str(taint.get("key")), str(taint.get("effect")))
            if pair in seen:
                raise invalid(
                    "Node", name, f"spec.taints[{i}]", "FieldValueDuplicate",
                    "Duplicate value: taints must be unique by key and effect pair",
                )  # fmt: skip
            seen.add(pair)


def _only_added(name: str, old: list[Obj], new: list[Obj] | None) -> None:
    def bare(t: Obj) -> Obj:
        return {k: v for k, v in t.items() if k != "tolerationSeconds" and v is not None}

    fresh = [bare(t) for t in new or []]
    for tol in old:
        if bare(tol) not in fresh:
            raise invalid(
                "Pod", name, "spec.tolerations", "FieldValueForbidden",
                "Forbidden: existing toleration can not be modified except its tolerationSeconds",
            )  # fmt: skip


def delete(
    store: KubeStore,
    res: Resource,
    namespace: str | None,
    name: str,
    options: Obj,
    *,
    dry_run: bool,
) -> Obj:
    """DELETE as the API server does it (graceful for bound pods; module docstring)."""
    pre = options.get("preconditions") or {}
    with store.cond:
        old = store.get(res, namespace, name)
        store.check_preconditions(res, old, pre.get("uid"), pre.get("resourceVersion"))
        if res.plural != "pods" or not (old.get("spec") or {}).get("nodeName"):
            return store.delete(res, namespace, name, dry_run=dry_run)
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = (old.get("spec") or {}).get(
                "terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS
            )
        if int(grace) == 0:
            return store.delete(res, namespace, name, dry_run=dry_run)
        return store.mark_terminating(res, old, int(grace), dry_run=dry_run)


def evict(
    store: KubeStore, res: Resource, namespace: str | None, name: str, body: Obj, *, dry_run: bool
) -> None:
    """An Eviction: a plain delete where no budget applies, else the budget's say."""
    if body.get("kind", "Eviction") != "Eviction":  # kind defaults from the URL
        raise ApiError(400, "BadRequest", "the body must be a policy/v1 Eviction")
    if body.get("metadata", {}).get("name", name) != name:
        raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
    options = dict(body.get("deleteOptions") or {})
    with store.cond:
        pod = store.get(res, namespace, name)
        pre = options.get("preconditions") or {}
        store.check_preconditions(res, pod, pre.get("uid"), pre.get("resourceVersion"))
        phase = (pod.get("status") or {}).get("phase")
        ignore_budget = phase in ("Pending", "Succeeded", "Failed") or bool(
            pod["metadata"].get("deletionTimestamp")
        )
        if not ignore_budget:
            blocked = disruption_blocker(store, pod)
            if blocked is not None:
                raise blocked
        delete(store, res, namespace, name, options, dry_run=dry_run)


def _ready(pod: Obj) -> bool:
    """``IsPodReady`` (pkg/api/v1/pod/util.go): the pod's ``Ready`` condition is ``True``."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def _healthy(pod: Obj) -> bool:
    """``countHealthyPods`` (pkg/controller/disruption/disruption.go): not being deleted,
    and Ready."""
    return not pod["metadata"].get("deletionTimestamp") and _ready(pod)


def _selects(pdb: Obj, pod: Obj) -> bool:
    """``LabelSelectorAsSelector`` (apimachinery pkg/apis/meta/v1/helpers.go) of the
    budget's selector: a null or absent selector matches nothing, an empty one (``{}``)
    everything (policy/v1)."""
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None:
        return False
    return object_selector_matches(selector, _labels(pod))


class _SyncFailed(Exception):
    """The disruption controller could not compute the budget's status (failSafe)."""


def _scaled(value: Any, total: int) -> int:
    """``intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true)``
    (apimachinery pkg/util/intstr/intstr.go)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value)
    if not text.endswith("%"):
        raise _SyncFailed("invalid value for IntOrString: invalid type: string is not a percentage")
    try:
        percent = int(text[:-1])
    except ValueError:
        raise _SyncFailed(f"invalid value for IntOrString: {text}") from None
    return math.ceil(percent * total / 100)


def _controller(obj: Obj) -> Obj | None:
    owners = obj["metadata"].get("ownerReferences") or []
    return next((o for o in owners if o.get("controller")), None)


def _scale_of(store: KubeStore, ref: Obj, ns: str) -> int | None:
    """The disruption controller's finders (pkg/controller/disruption/disruption.go:
    ``getPodReplicationController``, ``getPodDeployment``, ``getPodReplicaSet``,
    ``getPodStatefulSet``): a ReplicationController, a Deployment (through its ReplicaSet),
    a ReplicaSet, a StatefulSet; None when none of them is the pod's."""
    plural = {
        "ReplicationController": "replicationcontrollers",
        "ReplicaSet": "replicasets",
        "StatefulSet": "statefulsets",
    }.get(str(ref.get("kind")))
    if plural is None:
        return None
    try:
        owner = store.get(store.resource(plural), ns, str(ref.get("name")))
    except ApiError:
        return None
    if owner["metadata"].get("uid") != ref.get("uid"):
        return None
    if plural == "replicasets":
        up = _controller(owner)
        if up is not None and up.get("kind") == "Deployment":
            try:
                dep = store.get(store.resource("deployments"), ns, str(up.get("name")))
            except ApiError:
                dep = None
            if dep is not None and dep["metadata"].get("uid") == up.get("uid"):
                return int((dep.get("spec") or {}).get("replicas", 1))
            return None  # getPodReplicaSet skips a ReplicaSet a Deployment controls
    return int((owner.get("spec") or {}).get("replicas", 1))


def _expected_scale(store: KubeStore, ns: str, pods: list[Obj]) -> int:
    """``getExpectedScale`` (disruption.go): the replicas of the selected pods' controllers, each counted
    once; pods without a controller are left out; a controller of a kind with no finder
    fails the sync."""
    scales: dict[str, int] = {}
    for pod in pods:
        ref = _controller(pod)
        if ref is None:
            continue
        if str(ref.get("uid")) in scales:
            continue
        scale = _scale_of(store, ref, ns)
        if scale is None:
            raise _SyncFailed(f'found no controllers for pod "{pod["metadata"]["name"]}"')
        scales[str(ref.get("uid"))] = scale
    return sum(scales.values())


def _expected_and_desired(store: KubeStore, ns: str, spec: Obj, pods: list[Obj]) -> tuple[int, int]:
    """``getExpectedPodCount`` (pkg/controller/disruption/disruption.go)."""
    if spec.get("maxUnavailable") is not None:
        expected = _expected_scale(store, ns, pods)
        return expected, max(0, expected - _scaled(spec["maxUnavailable"], expected))
    min_available = spec.get("minAvailable")
    if min_available is None:
        return 0, 0
    if isinstance(min_available, int) and not isinstance(min_available, bool):
        return len(pods), min_available
    expected = _expected_scale(store, ns, pods)
    return expected, _scaled(min_available, expected)


def pdb_status(store: KubeStore, pdb: Obj) -> Obj:
    """The status the disruption controller keeps on a budget, as if it had just caught up
    (disruption.go ``trySync``/``updatePdbStatus``; on a failed sync, ``failSafe``: no disruption allowed
    and a ``SyncFailed`` condition, the generation not marked observed)."""
    ns = pdb["metadata"].get("namespace", "")
    spec: dict[str, Any] = pdb.get("spec") or {}
    pods, _ = store.list(store.resource("pods"), ns)
    members = [p for p in pods if _selects(pdb, p)]
    generation = int(pdb["metadata"].get("generation") or 1)
    when = pdb["metadata"].get("creationTimestamp") or "1970-01-01T00:00:00Z"
    try:
        expected, desired = _expected_and_desired(store, ns, spec, members)
    except _SyncFailed as e:
        failed = {"type": "DisruptionAllowed", "status": "False", "observedGeneration": 0,
                  "lastTransitionTime": when, "reason": "SyncFailed", "message": str(e)}  # fmt: skip
        return {"observedGeneration": 0, "disruptionsAllowed": 0, "currentHealthy": 0,
                "desiredHealthy": 0, "expectedPods": 0, "conditions": [failed]}  # fmt: skip
    healthy = sum(_healthy(p) for p in members)
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    # the controller's condition, as policy/v1 has it (meta/v1 Condition, every field)
    condition = {
        "type": "DisruptionAllowed",
        "status": "True" if allowed else "False",
        "observedGeneration": generation,
        "lastTransitionTime": when,
        "reason": "SufficientPods" if allowed else "InsufficientPods",
        "message": "",
    }
    return {
        "observedGeneration": generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [condition],
    }


def with_pdb_status(store: KubeStore, pdb: Obj) -> Obj:
    """``pdb`` as the API server serves it: with the controller's status, unless a test
    wrote one itself (e.g. a controller lagging behind the spec)."""
    if pdb.get("status"):
        return pdb
    return {**pdb, "status": pdb_status(store, pdb)}


def disruption_blocker(store: KubeStore, pod: Obj) -> ApiError | None:
    """What the Eviction API answers for a Running, not Terminating ``pod`` from its
    budgets: 500 when more than one selects it; nothing for a pod that is not Ready where
    the budget lets it go (``AlwaysAllow``, or ``currentHealthy >= desiredHealthy > 0``);
    else ``checkAndDecrement`` (pkg/registry/core/pod/storage/eviction.go): 429 (``DisruptionBudget`` cause) while the budget is still
    being processed or allows no disruption, 403 when its count is negative."""
    ns = pod["metadata"].get("namespace", "")
    pdbs, _ = store.list(store.resource("poddisruptionbudgets"), ns)
    mine = [with_pdb_status(store, p) for p in pdbs if _selects(p, pod)]
    if len(mine) > 1:
        return ApiError(
            500,
            "InternalError",
            "This pod has more than one PodDisruptionBudget, which the eviction subresource "
            "does not support.",
        )
    if not mine:
        return None
    pdb = mine[0]
    status, name = pdb["status"], pdb["metadata"]["name"]
    desired, current = (
        int(status.get("desiredHealthy") or 0),
        int(status.get("currentHealthy") or 0),
    )
    if not _ready(pod):
        if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
            return None
        if current >= desired > 0:
            return None
    if int(status.get("observedGeneration") or 0) < int(pdb["metadata"].get("generation") or 0):
        return disruption_budget_refusal(name, 0, 0, processing=True)
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        return ApiError(
            403,
            "Forbidden",
            f'poddisruptionbudget.policy "{name}" is forbidden: pdb disruptions allowed is '
            "negative",
        )
    if allowed == 0:
        return disruption_budget_refusal(name, desired, current)
    return None
