"""Who owns a workload: the person or team to route an alert or a report line to.

A site names its owner labels (``workloads.owner_label_keys``: ``gpuscope.io/owner``,
JupyterHub's ``hub.jupyter.org/username``...); the first one a pod carries wins. A pod with
none is owned by its controller (``StatefulSet/nb-user05``), which at least names something
a person can look up; a pod without either has no owner (``""``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


def pod_owner(
    labels: Mapping[str, Any] | str | None,
    keys: Sequence[str],
    owner_kind: str | None = None,
    owner_name: str | None = None,
) -> str:
    """The owner of a pod from its labels (a mapping, or JSON text as the store keeps it),
    the label keys to try in order, and its controller's kind and name."""
    if isinstance(labels, str):
        try:
            labels = json.loads(labels)
        except ValueError:
            labels = None
    if isinstance(labels, Mapping):
        for key in keys:
            value = labels.get(key)
            if isinstance(value, str) and value:
                return value
    if owner_kind and owner_name:
        return f"{owner_kind}/{owner_name}"
    return owner_name or ""
