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
  eviction handler does, from the budget's status (``disruptionsAllowed``, kept here as the
  disruption controller would, :func:`pdb_status`): 429 with the ``DisruptionBudget`` cause
  when it allows none or its status lags its generation, 500 when two budgets select the
  pod, and an empty selector selects nothing.
"""

from __future__ import annotations

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


def _healthy(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get(
        "deletionTimestamp"
    )


def _selects(pdb: Obj, pod: Obj) -> bool:
    """A budget's selector; an empty or absent one selects nothing (as the eviction
    handler reads it)."""
    selector = (pdb.get("spec") or {}).get("selector") or {}
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        return False
    return object_selector_matches(selector, _labels(pod))


def _count(value: Any, of: int) -> int:
    """An IntOrString of a budget: a number, or a percentage of ``of`` rounded up."""
    if isinstance(value, str) and value.endswith("%"):
        return -(-int(value[:-1]) * of // 100)
    return int(value)


def pdb_status(store: KubeStore, pdb: Obj) -> Obj:
    """The status the disruption controller keeps on a budget, as if it had just caught up
    (healthy: Running and not Terminating; the expected count is the pods it selects)."""
    ns = pdb["metadata"].get("namespace", "")
    spec: dict[str, Any] = pdb.get("spec") or {}
    pods, _ = store.list(store.resource("pods"), ns)
    members = [p for p in pods if _selects(pdb, p)]
    healthy = sum(_healthy(p) for p in members)
    if "minAvailable" in spec:
        desired = _count(spec["minAvailable"], len(members))
    else:
        desired = len(members) - _count(spec.get("maxUnavailable", 0), len(members))
    generation = int(pdb["metadata"].get("generation") or 1)
    allowed = max(0, healthy - desired)
    # the controller's condition, as policy/v1 has it (meta/v1 Condition, every field)
    condition = {
        "type": "DisruptionAllowed",
        "status": "True" if allowed else "False",
        "observedGeneration": generation,
        "lastTransitionTime": pdb["metadata"].get("creationTimestamp") or "1970-01-01T00:00:00Z",
        "reason": "SufficientPods" if allowed else "InsufficientPods",
        "message": "",
    }
    return {
        "observedGeneration": generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": len(members),
        "conditions": [condition],
    }


def with_pdb_status(store: KubeStore, pdb: Obj) -> Obj:
    """``pdb`` as the API server serves it: with the controller's status, unless a test
    wrote one itself (e.g. a controller lagging behind the spec)."""
    if pdb.get("status"):
        return pdb
    return {**pdb, "status": pdb_status(store, pdb)}


def disruption_blocker(store: KubeStore, pod: Obj) -> ApiError | None:
    """What the Eviction API answers for ``pod`` from its budgets' status: 500 when more
    than one selects it, 429 (``DisruptionBudget`` cause) while the budget is still being
    processed or allows no disruption."""
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
    if int(status.get("observedGeneration") or 0) < int(pdb["metadata"].get("generation") or 0):
        return disruption_budget_refusal(name, 0, 0, processing=True)
    if int(status.get("disruptionsAllowed") or 0) == 0:
        return disruption_budget_refusal(
            name, int(status.get("desiredHealthy") or 0), int(status.get("currentHealthy") or 0)
        )
    return None
