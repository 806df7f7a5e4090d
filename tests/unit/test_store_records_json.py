"""The JSON a record is stored as (``json_records``, ``record_inventory``'s comparison with
the versions kept) is the text ``dataclasses.asdict`` gave, for records of every shape the
store is handed: parsed inventory (nested tuples, mappings, enums), and dataclasses nested
in lists, tuples and dicts. A different text for the same object would open a new version
of every pod at every listing."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gpuscope.collector.cluster.inventory_records import node_from_json, pod_from_json
from gpuscope.collector.storage.store_sql import as_dict, json_records
from tests.unit.test_placement_regressions import k8s_node, k8s_pod


class Colour(StrEnum):
    RED = "red"


@dataclass(frozen=True)
class Leaf:
    x: float
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tree:
    name: str
    leaves: list[Leaf]
    by_name: Mapping[str, Leaf]
    pair: tuple[Leaf, int]
    colour: Colour = Colour.RED
    nothing: None = None
    nested: dict[str, list[tuple[int, Leaf]]] = field(default_factory=dict)


def _texts(rows: list[Any]) -> list[str]:
    out: list[str] = json_records(rows, ())["record"].to_pylist()
    return out


def _asdict_texts(rows: list[Any]) -> list[str]:
    return _texts([dataclasses.asdict(r) for r in rows])


def test_nested_dataclasses_are_written_as_asdict_wrote_them() -> None:
    leaf = Leaf(1.5, ("a", "b"))
    tree = Tree(
        "t", [leaf, Leaf(2.0)], {"k": leaf}, (leaf, 3), nested={"n": [(1, Leaf(-0.25, ("z",)))]}
    )
    assert _texts([tree]) == _asdict_texts([tree])
    assert json.loads(_texts([tree])[0])["nested"] == {"n": [[1, {"tags": ["z"], "x": -0.25}]]}
    # a NaN anywhere is null either way
    odd = Tree("nan", [Leaf(math.nan)], {}, (Leaf(math.inf), 0))
    assert _texts([odd]) == _asdict_texts([odd])
    assert json.loads(_texts([odd])[0])["leaves"] == [{"tags": [], "x": None}]


def test_parsed_inventory_is_written_as_asdict_wrote_it() -> None:
    node = node_from_json(k8s_node("n1", 8, taints=[{"key": "k", "effect": "NoSchedule"}]))
    pods = [
        pod_from_json(k8s_pod("whole", "n1", gpus=2), node=node),
        pod_from_json(k8s_pod("half", "n1", fraction=0.5), node=node),
        pod_from_json(k8s_pod("pending", None, gpus=4)),
    ]
    assert _texts([node]) == _asdict_texts([node])
    assert _texts(pods) == _asdict_texts(pods)


def test_as_dict_makes_a_new_dict_and_leaves_mappings_shallow() -> None:
    leaf = Leaf(1.0)
    row = {"leaf": leaf, "n": 1}
    copied = as_dict(row)
    assert copied == row and copied is not row and copied["leaf"] is leaf
    assert as_dict(leaf) == {"x": 1.0, "tags": []}
