"""Kubernetes objects read from ``kubectl get ... -o json`` files: the ``--objects FILE``
convention.

Every ``gpuscope analyze`` command and ``gpuscope whatif`` that take ``--nodes FILE --pods
FILE`` also take ``--objects FILE`` (repeatable): any other kind the inventory reads —
Kueue ClusterQueues, LocalQueues, Cohorts, ResourceFlavors, Workloads and Topologies, KAI
Queues, ResourceQuotas, PodDisruptionBudgets, DRA ResourceSlices, ResourceClaims,
ResourceClaimTemplates and DeviceClasses, Volcano HyperNodes... A file holds what kubectl
prints: a ``List`` (``kind: List`` or ``<Kind>List``, with ``items``) or one object.
Objects are kept as the API server sent them (plain JSON mappings) and grouped by ``kind``
with their ``apiVersion``, so each reader picks the kinds (and versions) it understands and
the rest is ignored, never refused.

Pure: reading the files is the only I/O, done by :func:`load_objects` at the entry point.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuscope.core.errors import UserError

KubeObject = Mapping[str, Any]


@dataclass(frozen=True)
class ObjectSet:
    """Kubernetes objects by kind, in file order (a later file's object with the same
    kind, namespace and name replaces the earlier one, as a newer snapshot would)."""

    by_kind: Mapping[str, tuple[KubeObject, ...]] = field(default_factory=dict)

    def of(self, *kinds: str, group: str | None = None) -> tuple[KubeObject, ...]:
        """The objects of these kinds; with ``group``, only those whose ``apiVersion`` is
        in that API group (``"kueue.x-k8s.io"``, ``"resource.k8s.io"``; ``""`` for core)."""
        out: list[KubeObject] = []
        for kind in kinds:
            for obj in self.by_kind.get(kind, ()):
                if group is None or api_group(obj) == group:
                    out.append(obj)
        return tuple(out)

    def kinds(self) -> frozenset[str]:
        return frozenset(k for k, v in self.by_kind.items() if v)

    def __bool__(self) -> bool:
        return any(self.by_kind.values())


def api_group(obj: KubeObject) -> str:
    """``kueue.x-k8s.io`` of ``kueue.x-k8s.io/v1beta2``; ``""`` for the core group (``v1``)."""
    version = str(obj.get("apiVersion") or "")
    return version.rsplit("/", 1)[0] if "/" in version else ""


def api_version(obj: KubeObject) -> str:
    """``v1beta2`` of ``kueue.x-k8s.io/v1beta2``."""
    return str(obj.get("apiVersion") or "").rsplit("/", 1)[-1]


def _identity(obj: KubeObject) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return (
        str(obj.get("kind") or ""),
        api_group(obj),
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
    )


def objects_from_documents(docs: Iterable[tuple[str, Any]]) -> ObjectSet:
    """Group the objects of parsed documents (``(source name, JSON value)`` pairs).

    Raises :class:`UserError` naming the source for a document that is neither a List nor
    an object with a ``kind``."""
    seen: dict[tuple[str, str, str, str], KubeObject] = {}
    for source, doc in docs:
        for obj in _items(source, doc):
            seen[_identity(obj)] = obj
    by_kind: dict[str, list[KubeObject]] = {}
    for (kind, *_), obj in seen.items():
        by_kind.setdefault(kind, []).append(obj)
    return ObjectSet({k: tuple(v) for k, v in by_kind.items()})


def _items(source: str, doc: Any) -> list[KubeObject]:
    if not isinstance(doc, dict):
        raise UserError(
            f"{source}: expected a kubectl JSON object or List, got {type(doc).__name__}"
        )
    kind = doc.get("kind")
    if isinstance(doc.get("items"), list) and (kind is None or str(kind).endswith("List")):
        items = doc["items"]
        bad = [i for i, item in enumerate(items) if not isinstance(item, dict)]
        if bad:
            raise UserError(f"{source}: items[{bad[0]}] is not an object")
        # kubectl's typed lists (PodList...) leave each item's kind out; the list names it
        item_kind = str(kind)[: -len("List")] if kind and str(kind) != "List" else None
        version = doc.get("apiVersion")
        out = []
        for item in items:
            if item.get("kind"):
                out.append(item)
                continue
            if not item_kind:
                raise UserError(f"{source}: an item of the List has no 'kind'")
            out.append({"kind": item_kind, "apiVersion": version, **item})
        return out
    if not isinstance(kind, str) or not kind:
        raise UserError(f"{source}: not a Kubernetes object (no 'kind') nor a List ('items')")
    return [doc]


def load_objects(paths: Sequence[Path]) -> ObjectSet:
    """Read ``--objects`` files; one clear :class:`UserError` for a missing, unreadable or
    malformed file."""
    docs: list[tuple[str, Any]] = []
    for path in paths:
        if path.is_dir():
            raise UserError(f"--objects {path} is a folder; expected a file")
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UserError(f"--objects {path} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"--objects {path} cannot be read: {exc}") from None
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise UserError(f"--objects {path} is not kubectl JSON: {exc}") from None
        docs.append((f"--objects {path}", doc))
    return objects_from_documents(docs)
