"""The scheduled analytics run reads the cluster's inventory at its instant once, for the
fragmentation, quota and topology detectors alike (gpuscope/analytics/inventory.py,
``InventoryReads``; issue 39: three reads of the same rows and two fragmentation analyses a
run), and each detector's answer is the one it gives on its own."""

from __future__ import annotations

from datetime import UTC, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest.mock import MagicMock

import pytest

import gpuscope.service as service_module
from gpuscope.analytics.inventory import InventoryReads, Q, analysis_at
from gpuscope.analytics.runner import run_on_store
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.collector.storage import store as store_module
from gpuscope.collector.storage.store import Store, utc
from gpuscope.core.settings import Settings
from tests.integration.test_idle import END, T0
from tests.integration.test_idle_job_record import idle_store

pytestmark = pytest.mark.integration

EPOCH_S = T0.replace(tzinfo=UTC).timestamp()


class Counting:
    """A cursor that counts the statements run through it by their SQL text."""

    def __init__(self, cur: Any, seen: dict[str, int]) -> None:
        self._cur, self._seen = cur, seen

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)

    def execute(self, sql: str, *args: Any, **kwargs: Any) -> Any:
        self._seen[sql] = self._seen.get(sql, 0) + 1
        result = self._cur.execute(sql, *args, **kwargs)
        return self if result is self._cur else result


def cluster_store(path: Path) -> Store:
    """test_idle_job_record's hour of a notebook and a training pod on n1, with the
    inventory: two nodes of 8 GPUs, and a job of 16 GPUs waiting (so the quota view asks
    where it could be placed)."""
    store = idle_store(path)
    nodes = [NodeInfo(name=n, gpu_model="H100", allocatable_gpus=8, cpu_milli=64000)
             for n in ("n1", "n2")]  # fmt: skip

    def pod(ns: str, name: str, node: str | None, gpus: int, phase: str) -> PodInfo:
        return PodInfo(
            namespace=ns, name=name, uid=name, node=node, phase=phase, start_time=EPOCH_S,
            gpu_request=gpus, gpu_fraction=None, project=ns, owner_kind="Job",
            owner_name=name, pending_reason="Unschedulable" if node is None else "",
        )  # fmt: skip

    pods = [pod("team-a", "nb-1", "n1", 1, "Running"), pod("team-b", "train-1", "n1", 1, "Running"),
            pod("team-b", "big-1", None, 16, "Pending")]  # fmt: skip
    store.record_inventory(T0, nodes=nodes, pods=pods, quotas=[])
    return store


def test_the_run_reads_the_inventory_once_and_answers_as_each_detector_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings()
    at = END.replace(tzinfo=UTC) + timedelta(seconds=30)
    which = ["fragmentation", "quota", "topology"]
    with cluster_store(tmp_path / "a.duckdb") as alone:
        expected = {n: run_on_store(alone, at, settings, [n], persist=False)[n] for n in which}
    with cluster_store(tmp_path / "b.duckdb") as store:
        seen: dict[str, int] = {}
        new_cursor = store_module.Store._new_cursor
        monkeypatch.setattr(
            store_module.Store, "_new_cursor", lambda self: Counting(new_cursor(self), seen)
        )
        svc = SimpleNamespace(
            settings=settings, store=store, clock=at.timestamp, metrics=MagicMock()
        )
        done = service_module.analytics_job(svc)  # type: ignore[arg-type]
    for name in which:
        assert done[name].findings == expected[name].findings, name
        assert done[name].summary == expected[name].summary, name
    assert done["fragmentation"].summary["total_gpus"] == 16  # the inventory was there
    assert seen[Q["nodes_at"]] == 1
    assert seen[Q["pods_at"]] == 1
    assert seen[Q["gpu_indices_at"]] == 1


def test_the_reads_are_kept_by_instant_and_the_analysis_by_settings(tmp_path: Path) -> None:
    settings, other = Settings().analytics, Settings().analytics.model_copy()
    at = utc(END)
    with cluster_store(tmp_path / "c.duckdb") as store:
        seen: dict[str, int] = {}
        cur = Counting(store.cursor(), seen)
        reads = InventoryReads()
        first = reads.analysis(cur, at, settings)  # type: ignore[arg-type]
        assert reads.analysis(cur, at, settings) is first  # type: ignore[arg-type]
        assert first is not None
        assert first.summary == analysis_at(store.cursor(), at, settings).summary  # type: ignore[union-attr]
        assert reads.records(cur, at)[0] == reads.records(cur, at)[0]  # type: ignore[arg-type]
        assert seen[Q["nodes_at"]] == 1
        assert reads.analysis(cur, at, other) is not first  # type: ignore[arg-type]
        assert seen[Q["nodes_at"]] == 1  # the same rows, analysed again
        reads.records(cur, at - timedelta(minutes=5))  # type: ignore[arg-type]
        assert seen[Q["nodes_at"]] == 2  # another instant: read
