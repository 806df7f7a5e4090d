"""The reservation of a node freed for one pending pod: a taint of gpuscope's own and the
one toleration that matches it (pure helpers; gpuscope/actions/node_freeing.py applies them).

The taint ``gpuscope.io/reserved-for=<value>:NoSchedule`` keeps every pod off the node
except one with the toleration ``gpuscope.io/reserved-for Equal <value> NoSchedule``, and
``<value>`` names the one pending pod (``namespace.name``, made a valid label value). No
cordon is needed: the scheduler already keeps pods without the toleration off a
NoSchedule-tainted node, and pods that tolerate everything (``operator: Exists`` without a
key, as some DaemonSets do) pass a cordon too. Kubernetes lets tolerations be added to a
pod but never removed: once the taint is lifted, the toleration left on the pod matches
nothing, so it can never let that pod onto a node cordoned or tainted for anything else.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

RESERVED_KEY = "gpuscope.io/reserved-for"
#: Node annotations written with the taint: the pending pod (``namespace/name``) and until
#: when the reservation holds (RFC 3339), so a reservation explains itself and is lifted on
#: time even when the database lost its state.
RESERVED_FOR = "gpuscope.io/reserved-for"
RESERVED_UNTIL = "gpuscope.io/reserved-until"
#: On a node reserved for a pending pod group: its member pods (``namespace/pod``, comma
#: separated), so the reservation is lifted when the whole group is bound even when the
#: database lost its state.
RESERVED_MEMBERS = "gpuscope.io/reserved-members"
EFFECT = "NoSchedule"
_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def taint_value(goal: str) -> str:
    """``namespace/name`` as a label value (63 characters at most, alphanumeric at both
    ends); a long one keeps a hash of the whole, so two pods never share a value."""
    text = _BAD.sub("-", goal.replace("/", ".")).strip("-_.")
    if len(text) > 63:
        digest = hashlib.sha256(goal.encode()).hexdigest()[:10]
        text = f"{text[:52].rstrip('-_.')}-{digest}"
    return text or hashlib.sha256(goal.encode()).hexdigest()[:10]


def taint(goal: str) -> dict[str, str]:
    return {"key": RESERVED_KEY, "value": taint_value(goal), "effect": EFFECT}


def toleration(goal: str) -> dict[str, str]:
    return {"key": RESERVED_KEY, "operator": "Equal", "value": taint_value(goal), "effect": EFFECT}


def tolerates(pod: Mapping[str, Any], goal: str) -> bool:
    """Whether the pod carries the toleration for ``goal`` already."""
    want = toleration(goal)
    for tol in (pod.get("spec") or {}).get("tolerations") or []:
        if all(tol.get(k) == v for k, v in want.items()):
            return True
    return False


def our_taints(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") == RESERVED_KEY]


def other_taints(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != RESERVED_KEY]


def reserved_until(node: Mapping[str, Any]) -> datetime | None:
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(RESERVED_UNTIL, "")
    try:
        at = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def reserved_goal(node: Mapping[str, Any]) -> str:
    return str(((node.get("metadata") or {}).get("annotations") or {}).get(RESERVED_FOR, ""))


def terminating(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def reserved_members(node: Mapping[str, Any]) -> list[str]:
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(RESERVED_MEMBERS, "")
    return [m for m in str(text).split(",") if m]
