"""Node selectors and required node affinity: gpuscope's encoding and matching against a
reference written here from the Kubernetes rules (NodeAffinity plugin: ``nodeSelector``
entries all equal; terms OR'ed, requirements in a term AND'ed; an empty term matches
nothing; ``Gt``/``Lt`` compare integers; ``matchFields`` on ``metadata.name``), on random
pod specs and node labels."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscope.collector.cluster.node_selection import matches, node_selector_terms

KEYS = ["pool", "zone", "nvidia.com/gpu.product", "gpus"]
VALUES = ["a", "b", "1", "8"]


def reference(spec: dict[str, Any], labels: dict[str, str], name: str) -> bool:
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True

    def holds(req: dict[str, Any], have: dict[str, str]) -> bool:
        key, op, vals = req["key"], req["operator"], req.get("values") or []
        if op == "In":
            return key in have and have[key] in vals
        if op == "NotIn":
            return key not in have or have[key] not in vals
        if op == "Exists":
            return key in have
        if op == "DoesNotExist":
            return key not in have
        if op in ("Gt", "Lt"):
            if key not in have or len(vals) != 1:
                return False
            try:
                mine, theirs = int(have[key]), int(vals[0])
            except ValueError:
                return False
            return mine > theirs if op == "Gt" else mine < theirs
        return False

    for term in required.get("nodeSelectorTerms") or []:
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not exprs and not fields:
            continue
        if all(holds(e, labels) for e in exprs) and all(
            holds(f, {"metadata.name": name}) for f in fields
        ):
            return True
    return False


requirements = st.fixed_dictionaries(
    {
        "key": st.sampled_from(KEYS),
        "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]),
        "values": st.lists(st.sampled_from(VALUES), max_size=2),
    }
)
name_fields = st.fixed_dictionaries(
    {
        "key": st.just("metadata.name"),
        "operator": st.sampled_from(["In", "NotIn"]),
        "values": st.lists(st.sampled_from(["n1", "n2"]), min_size=1, max_size=2),
    }
)
terms = st.fixed_dictionaries(
    {},
    optional={
        "matchExpressions": st.lists(requirements, max_size=3),
        "matchFields": st.lists(name_fields, max_size=1),
    },
)
specs = st.fixed_dictionaries(
    {},
    optional={
        "nodeSelector": st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2),
        "affinity": st.builds(
            lambda ts: {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": ts}
                }
            },
            st.lists(terms, max_size=3),
        ),
    },
)


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(
    specs,
    st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=4),
    st.sampled_from(["n1", "n2", "n3"]),
)
def test_matching_agrees_with_the_reference(
    spec: dict[str, Any], labels: dict[str, str], name: str
) -> None:
    assert matches(node_selector_terms(spec), labels, name) == reference(spec, labels, name)


def test_no_constraint_is_empty_and_empty_terms_match_nothing() -> None:
    assert node_selector_terms({}) == ()
    assert matches((), {}, "n1")
    nothing = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}
            }
        }
    }
    assert not matches(node_selector_terms(nothing), {"pool": "a"}, "n1")
