"""The --objects FILE convention: kubectl Lists and single objects grouped by kind."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuscope.core.errors import UserError
from gpuscope.core.kube_objects import api_group, load_objects

CQ = {
    "apiVersion": "kueue.x-k8s.io/v1beta1",
    "kind": "ClusterQueue",
    "metadata": {"name": "team-a"},
    "spec": {"cohort": "all"},
}
LQ = {
    "apiVersion": "kueue.x-k8s.io/v1beta1",
    "kind": "LocalQueue",
    "metadata": {"name": "user-queue", "namespace": "team-a"},
    "spec": {"clusterQueue": "team-a"},
}


def test_a_list_and_a_single_object_are_grouped_by_kind(tmp_path: Path) -> None:
    (tmp_path / "list.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": [CQ, LQ]})
    )
    (tmp_path / "one.json").write_text(json.dumps({**CQ, "metadata": {"name": "team-b"}}))
    objs = load_objects([tmp_path / "list.json", tmp_path / "one.json"])
    assert [o["metadata"]["name"] for o in objs.of("ClusterQueue")] == ["team-a", "team-b"]
    assert objs.of("LocalQueue", group="kueue.x-k8s.io") == (LQ,)
    assert objs.of("LocalQueue", group="") == ()
    assert objs.kinds() == {"ClusterQueue", "LocalQueue"}


def test_a_typed_list_names_its_items_kind(tmp_path: Path) -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "ResourceQuotaList",
        "items": [{"metadata": {"name": "q", "namespace": "ns"}}],
    }
    (tmp_path / "q.json").write_text(json.dumps(doc))
    [quota] = load_objects([tmp_path / "q.json"]).of("ResourceQuota")
    assert quota["metadata"]["name"] == "q" and api_group(quota) == ""


def test_a_later_file_replaces_the_same_object(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(CQ))
    newer = {**CQ, "spec": {"cohort": "other"}}
    (tmp_path / "b.json").write_text(json.dumps(newer))
    assert load_objects([tmp_path / "a.json", tmp_path / "b.json"]).of("ClusterQueue") == (newer,)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "is not kubectl JSON"),
        ("[1, 2]", "expected a kubectl JSON object or List"),
        ('{"items": [1]}', "items[0] is not an object"),
        ('{"metadata": {}}', "no 'kind'"),
        ('{"kind": "List", "items": [{"metadata": {}}]}', "has no 'kind'"),
    ],
)
def test_bad_files_are_one_clear_error(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "f.json").write_text(content)
    with pytest.raises(UserError, match=re.escape(message)):
        load_objects([tmp_path / "f.json"])


def test_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_objects([tmp_path / "nope.json"])
    with pytest.raises(UserError, match="is a folder"):
        load_objects([tmp_path])
