"""State of the fake Kubernetes API server: objects, resourceVersions, watch history.

Kept apart from the HTTP layer (kube_api.py) so the semantics can be read in one place:
every change bumps one cluster-wide resourceVersion and is appended to the history that
watches replay; ``compact()`` forgets that history, after which a watch from an older
version gets 410 Gone, as from an etcd compaction. Stored objects are never mutated in
place: a change stores a new dict, so history entries stay what they were.
"""

from __future__ import annotations

import copy
import re
import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    plural: str
    kind: str
    group_version: str
    namespaced: bool

    @property
    def builtin(self) -> bool:
        """Built-in kinds, whose list items carry no kind/apiVersion (custom ones do)."""
        return "." not in self.group_version or self.group_version.endswith(".k8s.io/v1")


RESOURCES = (
    Resource("nodes", "Node", "v1", False),
    Resource("pods", "Pod", "v1", True),
    Resource("namespaces", "Namespace", "v1", False),
    Resource("resourcequotas", "ResourceQuota", "v1", True),
    Resource("events", "Event", "v1", True),
    Resource("poddisruptionbudgets", "PodDisruptionBudget", "policy/v1", True),
    # the workload controllers whose scale the disruption controller reads (kube_rules)
    Resource("replicationcontrollers", "ReplicationController", "v1", True),
    Resource("replicasets", "ReplicaSet", "apps/v1", True),
    Resource("deployments", "Deployment", "apps/v1", True),
    Resource("statefulsets", "StatefulSet", "apps/v1", True),
    Resource("clusterqueues", "ClusterQueue", "kueue.x-k8s.io/v1beta1", False),
    Resource("localqueues", "LocalQueue", "kueue.x-k8s.io/v1beta1", True),
    Resource("cohorts", "Cohort", "kueue.x-k8s.io/v1beta1", False),
    Resource("resourceflavors", "ResourceFlavor", "kueue.x-k8s.io/v1beta1", False),
    Resource("queues", "Queue", "scheduling.run.ai/v2", False),
    Resource("notebooks", "Notebook", "kubeflow.org/v1", True),
    # Dynamic Resource Allocation, GA in Kubernetes 1.34 (tests/fakes/dra_objects.py)
    Resource("resourceslices", "ResourceSlice", "resource.k8s.io/v1", False),
    Resource("resourceclaims", "ResourceClaim", "resource.k8s.io/v1", True),
    Resource("resourceclaimtemplates", "ResourceClaimTemplate", "resource.k8s.io/v1", True),
    Resource("deviceclasses", "DeviceClass", "resource.k8s.io/v1", False),
)
#: API groups served unless told otherwise: KAI's queues CRD is not installed; DRA's
#: resource.k8s.io/v1 is, as on Kubernetes 1.34 and later.
DEFAULT_INSTALLED = frozenset(
    {
        "v1",
        "apps/v1",
        "policy/v1",
        "kueue.x-k8s.io/v1beta1",
        "kubeflow.org/v1",
        "resource.k8s.io/v1",
    }
)


class ApiError(Exception):
    """An error the API server answers with a ``Status`` object."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: Obj | None = None,
        *,
        headers: Mapping[str, str] | None = None,
    ):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details
        self.headers: dict[str, str] = dict(headers or {})

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def not_found(res: Resource | None = None, name: str = "") -> ApiError:
    if res is None:
        return ApiError(404, "NotFound", "the server could not find the requested resource")
    return ApiError(
        404, "NotFound", f'{res.plural} "{name}" not found', {"name": name, "kind": res.plural}
    )


# -- selectors ------------------------------------------------------------------------------
_TERM = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*"
    r"(?:(?P<op>==|!=|=|\s+in\s+|\s+notin\s+)\s*(?P<val>\([^)]*\)|[A-Za-z0-9_.-]*))?\s*$"
)


def _split_terms(selector: str) -> list[str]:
    terms, depth, cur = [], 0, ""
    for ch in selector:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    return [t for t in [*terms, cur] if t.strip()]


def label_selector_matches(selector: str, labels: Mapping[str, str]) -> bool:
    """``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``."""
    for term in _split_terms(selector):
        m = _TERM.match(term)
        if m is None:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {term!r}")
        key, op, val = m["key"], (m["op"] or "").strip(), m["val"] or ""
        if m["neg"]:
            ok = key not in labels
        elif not op:
            ok = key in labels
        elif op in ("=", "=="):
            ok = labels.get(key) == val
        elif op == "!=":
            ok = labels.get(key) != val
        else:
            values = {v.strip() for v in val.strip("()").split(",")}
            ok = (labels.get(key) in values) if op == "in" else (labels.get(key) not in values)
        if not ok:
            return False
    return True


def field_selector_matches(selector: str, obj: Obj) -> bool:
    """``spec.nodeName=x``, ``metadata.name==x``, ``status.phase!=Running``, comma-joined."""
    for term in _split_terms(selector):
        m = re.match(r"^\s*([A-Za-z.]+)\s*(==|!=|=)\s*(.*?)\s*$", term)
        if m is None:
            raise ApiError(400, "BadRequest", f"invalid field selector: {term!r}")
        value: Any = obj
        for part in m[1].split("."):
            value = value.get(part, "") if isinstance(value, dict) else ""
        if (str(value) == m[3]) != (m[2] != "!="):
            return False
    return True


def object_selector_matches(selector: Obj, labels: Mapping[str, str]) -> bool:
    """A LabelSelector object (``matchLabels`` and ``matchExpressions``)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], set(expr.get("values", []))
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (``null`` deletes a key)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _labels(obj: Obj) -> Mapping[str, str]:
    labels: Mapping[str, str] = obj.get("metadata", {}).get("labels") or {}
    return labels


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    resource: Resource
    type: str
    obj: Obj
    old: Obj | None = None


class KubeStore:
    """Objects by (plural, namespace, name), a cluster-wide resourceVersion, history."""

    def __init__(self, installed: Iterable[str] = DEFAULT_INSTALLED, first_rv: int = 1000):
        self.installed = set(installed)
        self.cond = threading.Condition(threading.RLock())
        self.rv = first_rv
        self.compacted_rv = 0
        self.closed = False
        self._objects: dict[tuple[str, str, str], Obj] = {}
        self._history: list[WatchEvent] = []

    # -- lookup -----------------------------------------------------------------------------
    def resource(self, plural: str, group_version: str | None = None) -> Resource:
        for res in RESOURCES:
            if res.plural == plural and group_version in (None, res.group_version):
                if res.group_version not in self.installed:
                    raise not_found()
                return res
        raise not_found()

    def resource_for_kind(self, kind: str) -> Resource:
        for res in RESOURCES:
            if res.kind == kind:
                return res
        raise KeyError(kind)

    def get(self, res: Resource, namespace: str | None, name: str) -> Obj:
        with self.cond:
            obj = self._objects.get((res.plural, namespace or "", name))
            if obj is None:
                raise not_found(res, name)
            return obj

    def list(
        self, res: Resource, namespace: str | None, labels: str = "", fields: str = ""
    ) -> tuple[list[Obj], int]:
        with self.cond:
            items = [
                obj
                for (plural, ns, _), obj in sorted(self._objects.items())
                if plural == res.plural
                and (namespace is None or ns == namespace)
                and self.selected(obj, labels, fields)
            ]
            return items, self.rv

    @staticmethod
    def selected(obj: Obj | None, labels: str, fields: str) -> bool:
        return (
            obj is not None
            and label_selector_matches(labels, _labels(obj))
            and field_selector_matches(fields, obj)
        )

    def events_after(self, rv: int) -> list[WatchEvent]:
        """Changes after ``rv``; 410 Gone if history that old was compacted away."""
        with self.cond:
            if rv < self.compacted_rv:
                raise ApiError(
                    410, "Expired", f"too old resource version: {rv} ({self.compacted_rv})"
                )
            return [e for e in self._history if e.rv > rv]

    # -- changes ----------------------------------------------------------------------------
    def _commit(self, res: Resource, kind: str, obj: Obj, old: Obj | None) -> Obj:
        self.rv += 1
        obj = merge_patch(obj, {"metadata": {"resourceVersion": str(self.rv)}})
        meta = obj["metadata"]
        key = (res.plural, meta.get("namespace", ""), meta["name"])
        if kind == "DELETED":
            self._objects.pop(key, None)
        else:
            self._objects[key] = obj
        self._history.append(WatchEvent(self.rv, res, kind, obj, old))
        self.cond.notify_all()
        return obj

    def create(self, obj: Obj, namespace: str | None = None, *, dry_run: bool = False) -> Obj:
        """Add an object (its kind names the resource); 409 if the name is taken."""
        res = self.resource_for_kind(obj["kind"])
        obj = copy.deepcopy(obj)
        obj.setdefault("apiVersion", res.group_version)
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        if "name" not in meta and "generateName" in meta:
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        with self.cond:
            key = (res.plural, meta.get("namespace", ""), meta["name"])
            if key in self._objects:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{res.plural} "{meta["name"]}" already exists',
                    {"name": meta["name"], "kind": res.plural},
                )
            meta.setdefault("uid", str(uuid.uuid4()))
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            meta.setdefault("creationTimestamp", now)
            return obj if dry_run else self._commit(res, "ADDED", obj, None)

    def load(self, *objects: Obj) -> None:
        """Create objects, or the items of ``List`` objects (``kubectl get -o json``)."""
        for obj in objects:
            for item in obj["items"] if obj.get("kind", "").endswith("List") else [obj]:
                self.create(item)

    def patch(
        self, res: Resource, namespace: str | None, name: str, patch: Obj, *, dry_run: bool = False
    ) -> Obj:
        with self.cond:
            old = self.get(res, namespace, name)
            new = merge_patch(old, patch)
            new["metadata"]["name"], new["metadata"]["uid"] = name, old["metadata"]["uid"]
            return new if dry_run else self._commit(res, "MODIFIED", new, old)

    def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        *,
        dry_run: bool = False,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> Obj:
        """Delete at once; with ``uid`` or ``resource_version`` (preconditions) 409 when the
        object is another one, or another version, now."""
        with self.cond:
            old = self.get(res, namespace, name)
            self.check_preconditions(res, old, uid, resource_version)
            return old if dry_run else self._commit(res, "DELETED", old, old)

    def mark_terminating(self, res: Resource, old: Obj, grace: int, *, dry_run: bool) -> Obj:
        """A graceful delete: ``deletionTimestamp`` (now + grace) and the grace period set,
        the object kept until :meth:`finish_terminating` (the kubelet's confirmation)."""
        with self.cond:
            if old["metadata"].get("deletionTimestamp"):
                return old  # already going: a second delete changes nothing
            at = datetime.now(UTC) + timedelta(seconds=grace)
            new = merge_patch(
                old,
                {
                    "metadata": {
                        "deletionTimestamp": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "deletionGracePeriodSeconds": grace,
                    }
                },
            )
            return new if dry_run else self._commit(res, "MODIFIED", new, old)

    def finish_terminating(self) -> int:
        """Remove every Terminating pod (as kubelets confirm their stops); returns how many."""
        res = self.resource("pods")
        with self.cond:
            going = [
                o for (p, _, _), o in sorted(self._objects.items())
                if p == "pods" and o["metadata"].get("deletionTimestamp")
            ]  # fmt: skip
            for obj in going:
                self._commit(res, "DELETED", obj, obj)
            return len(going)

    @staticmethod
    def check_preconditions(
        res: Resource, old: Obj, uid: str | None, resource_version: str | None
    ) -> None:
        """The storage layer's preconditions, with its message."""
        meta = old["metadata"]
        what = ""
        if uid is not None and meta.get("uid") != uid:
            what = f"UID in precondition: {uid}, UID in object meta: {meta.get('uid')}"
        elif resource_version is not None and meta.get("resourceVersion") != resource_version:
            what = (
                f"ResourceVersion in precondition: {resource_version}, "
                f"ResourceVersion in object meta: {meta.get('resourceVersion')}"
            )
        if what:
            key = f"/registry/{res.plural}/{meta.get('namespace', '')}/{meta['name']}".replace(
                "//", "/"
            )
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {res.plural} "{meta["name"]}": StorageError: '
                f"invalid object, Code: 4, Key: {key}, ResourceVersion: 0, "
                f"AdditionalErrorMsg: Precondition failed: {what}",
                {"name": meta["name"], "kind": res.plural},
            )

    def compact(self) -> int:
        """Forget the history up to now, as etcd compaction does; returns the version."""
        with self.cond:
            self.compacted_rv = self.rv
            self._history.clear()
            return self.rv

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
