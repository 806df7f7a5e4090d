"""A pod's hard node constraints on labels: ``nodeSelector`` and required node affinity.

The scheduler's NodeAffinity plugin admits a node only when every ``nodeSelector`` entry
equals the node's label and, where ``requiredDuringSchedulingIgnoredDuringExecution`` is
set, at least one of its ``nodeSelectorTerms`` matches (terms are OR'ed; within a term
every ``matchExpressions`` and ``matchFields`` requirement must hold). Operators: ``In``,
``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt`` and ``Lt`` (integers); ``matchFields``
knows ``metadata.name`` only. A term with no requirement matches nothing; a selector whose
terms list is empty matches nothing either.

The constraint is kept as plain strings so it travels in inventory records (JSON in the
store) and hashes in frozen records: a tuple of terms, each term the requirements joined
by ``;``, each requirement ``key|Operator|v1,v2``; the ``nodeSelector`` entries are folded
into every term as ``In`` requirements. ``()`` means no constraint. :func:`matches` decides
a node from its labels and name. The GPU-model pin (``nvidia.com/gpu.product``) is part of
it too; the FGD task types still key on the model text apart
(:func:`gpuscope.collector.cluster.scheduling_rules.gpu_spec`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: The only field ``matchFields`` may name.
NAME_FIELD = "metadata.name"
#: A selector no node satisfies (required affinity with an empty terms list).
NOTHING = ("",)

_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


def _requirement(expr: Mapping[str, Any], field: bool = False) -> str:
    key = str(expr.get("key") or "")
    operator = str(expr.get("operator") or "")
    values = ",".join(str(v) for v in expr.get("values") or ())
    if field:
        key = f"@{key}"
    return f"{key}|{operator}|{values}"


def node_selector_terms(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The pod's hard label constraints as terms (module docstring); ``()`` for none."""
    selector = [f"{k}|In|{v}" for k, v in sorted((spec.get("nodeSelector") or {}).items()) if k]
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return (";".join(selector),) if selector else ()
    terms = []
    for term in required.get("nodeSelectorTerms") or ():
        parts = [_requirement(e) for e in term.get("matchExpressions") or ()]
        parts += [_requirement(e, field=True) for e in term.get("matchFields") or ()]
        # a term without requirements matches no node (the scheduler's rule)
        terms.append(";".join(selector + parts) if parts else "")
    return tuple(sorted(set(terms))) if terms else NOTHING


def _holds(requirement: str, labels: Mapping[str, str], name: str) -> bool:
    key, operator, values = [*requirement.split("|", 2), "", ""][:3]
    options = [v for v in values.split(",") if v] if values else []
    if key.startswith("@"):  # matchFields: metadata.name with In / NotIn only
        if key[1:] != NAME_FIELD or operator not in ("In", "NotIn"):
            return False
        return (name in options) == (operator == "In")
    if operator not in _OPERATORS:
        return False
    present = key in labels
    value = labels.get(key, "")
    if operator == "In":
        return present and value in options
    if operator == "NotIn":
        return not present or value not in options
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    try:  # Gt / Lt: one integer value, the label parsed as an integer
        (bound,) = options
        have, limit = int(value), int(bound)
    except ValueError:
        return False
    return have > limit if operator == "Gt" else have < limit


def matches(terms: Iterable[str], labels: Mapping[str, str], name: str = "") -> bool:
    """Whether a node with these labels (and name) satisfies the terms; ``()`` always."""
    terms = tuple(terms)
    if not terms:
        return True
    return any(
        bool(term) and all(_holds(r, labels, name) for r in term.split(";")) for term in terms
    )
