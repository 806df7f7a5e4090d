"""Values as the Kubernetes API writes them, for the simulated cluster's objects: times
(whole seconds), quantities (``8``, ``1500m``), stable uids and hashes, and the ``List``
that ``kubectl get -o json`` prints (gpuscope/sim/kube.py and kube_pods.py build on them).
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from typing import Any

from gpuscope.sim.behaviour import stable_id

__all__ = ["as_list", "hex64", "quantity", "rfc3339", "uid"]


def rfc3339(unix_seconds: float) -> str:
    """``2024-05-01T12:00:00Z``: Kubernetes times have whole seconds."""
    return datetime.fromtimestamp(int(unix_seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def quantity(value: float) -> str:
    """A Kubernetes quantity: ``8`` for whole numbers, ``1500m`` otherwise."""
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def uid(text: str) -> str:
    key = stable_id(text)
    return str(uuid.UUID(int=key << 64 | (key ^ 0x5A5A5A5A5A5A5A5A)))


def hex64(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def as_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}
